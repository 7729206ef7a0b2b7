package compactor.udf;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Final$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Partial$;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.aggregate.HashAggregateExec;
import org.apache.spark.sql.internal.SQLConf;

import scala.collection.JavaConverters;
import scala.collection.Seq;

/**
 * A physical-plan rule: a final hash aggregation placed directly over its partial one, with no exchange between
 * them, becomes one aggregation in complete mode.
 *
 * <p>Spark 3.5 plans every grouped aggregation as a partial aggregation, an exchange on the grouping keys, and a
 * final one; when the input is already clustered on those keys (a compaction's storage-partitioned scans, grouped
 * by topic partition) the exchange is left out, and the final aggregation builds a second hash table of every key
 * the partial one has just built, in the same task. Phase 1 of a first compaction groups a partition's range by
 * key: two hash tables of all its keys. In complete mode the task builds one. (An upstream pull request,
 * SPARK-57928, collapses such pairs in Spark itself.)
 *
 * <p>Applied after Spark has placed its exchanges (as a pre-columnar rule, {@link SessionExtensions}), so a pair
 * with an exchange between is never touched; only pairs grouped by plain columns (a {@code DISTINCT} too), without
 * distinct aggregate functions, are.
 * The only module that builds Spark's internal aggregation nodes; {@code tests/spark/test_one_pass_aggregates.py}
 * guards it. {@code spark.compactor.onePassAggregates=false} turns it off for a session.
 */
public final class OnePassAggregates extends Rule<SparkPlan> {
    /** The session setting that turns the rule off ({@code false}); on by default. */
    public static final String ENABLED = "spark.compactor.onePassAggregates";

    @Override
    public SparkPlan apply(final SparkPlan plan) {
        if (!Boolean.parseBoolean(SQLConf.get().getConfString(ENABLED, "true"))) {
            return plan;
        }
        return rewrite(plan);
    }

    private static SparkPlan rewrite(final SparkPlan plan) {
        final List<SparkPlan> children = JavaConverters.seqAsJavaList(plan.children());
        final List<SparkPlan> rewritten = new ArrayList<>(children.size());
        boolean changed = false;
        for (final SparkPlan child : children) {
            final SparkPlan next = rewrite(child);
            changed |= next != child;
            rewritten.add(next);
        }
        final SparkPlan node = changed ? plan.withNewChildren(JavaConverters.asScalaBuffer(rewritten).toSeq()) : plan;
        return node instanceof HashAggregateExec ? collapse((HashAggregateExec) node) : node;
    }

    private static SparkPlan collapse(final HashAggregateExec top) {
        if (!(top.child() instanceof HashAggregateExec) || top.isStreaming()) {
            return top;
        }
        final HashAggregateExec low = (HashAggregateExec) top.child();
        final List<AggregateExpression> finals = JavaConverters.seqAsJavaList(top.aggregateExpressions());
        final List<AggregateExpression> partials = JavaConverters.seqAsJavaList(low.aggregateExpressions());
        final List<NamedExpression> grouping = JavaConverters.seqAsJavaList(low.groupingExpressions());
        final List<NamedExpression> groupedAs = JavaConverters.seqAsJavaList(top.groupingExpressions());
        if (finals.size() != partials.size() || grouping.isEmpty() || grouping.size() != groupedAs.size()) {
            return top;
        }
        for (int i = 0; i < grouping.size(); i++) {
            if (!(grouping.get(i) instanceof Attribute)
                    || !grouping.get(i).exprId().equals(groupedAs.get(i).exprId())) {
                return top;
            }
        }
        final List<AggregateExpression> complete = new ArrayList<>(finals.size());
        for (int i = 0; i < finals.size(); i++) {
            final AggregateExpression last = finals.get(i);
            final AggregateExpression first = partials.get(i);
            if (last.mode() != Final$.MODULE$ || first.mode() != Partial$.MODULE$ || last.isDistinct()
                    || first.isDistinct() || !last.resultId().equals(first.resultId())
                    || !last.aggregateFunction().semanticEquals(first.aggregateFunction())) {
                return top;
            }
            complete.add(new AggregateExpression(first.aggregateFunction(), Complete$.MODULE$, false, first.filter(),
                    first.resultId()));
        }
        final Seq<AggregateExpression> functions = JavaConverters.asScalaBuffer(complete).toSeq();
        return new HashAggregateExec(top.requiredChildDistributionExpressions(), false, top.numShufflePartitions(),
                low.groupingExpressions(), functions, top.aggregateAttributes(), 0, top.resultExpressions(),
                low.child());
    }
}
