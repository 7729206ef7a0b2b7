package compactor.udf;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The product's Spark session extensions ({@code spark.sql.extensions}, beside Iceberg's): the physical-plan rule
 * {@link OnePassAggregates}, run after Spark has placed its exchanges (a columnar rule's pre-transition step, which
 * Spark applies to every plan, adaptive or not, after {@code EnsureRequirements}). A session without them plans as
 * Spark does; nothing depends on them but speed.
 */
public final class SessionExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(final SparkSessionExtensions extensions) {
        extensions.injectColumnar(new AbstractFunction1<SparkSession, ColumnarRule>() {
            @Override
            public ColumnarRule apply(final SparkSession session) {
                return new ColumnarRule() {
                    @Override
                    public Rule<SparkPlan> preColumnarTransitions() {
                        return new OnePassAggregates();
                    }
                };
            }
        });
        return BoxedUnit.UNIT;
    }
}
