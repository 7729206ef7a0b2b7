package compactor.udf;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * The DataFrame producer's counting pass: per Spark task, its rows per topic partition and its first bad row of
 * each kind, in one stage (no shuffle, no aggregation to generate code for), one line per task to the driver.
 *
 * <p>The frame's columns: the row's Spark partition (int), topic partition (int), the kind of problem it has
 * (int, 0 for none: the producer's checks, as Spark expressions) and the offending value (long, nullable). A bad
 * row is not counted (its topic partition may be out of range); the producer fails the batch on any.
 */
public final class TopicCounts {
    private TopicCounts() {
    }

    /**
     * Count {@code frame}'s rows; returns, per task that saw rows,
     * {@code spark partition \t count per topic partition (comma-separated) \t kind:row:value;...}, where row is
     * the 1-based row within the Spark partition of the first bad row of that kind, and value is empty when null.
     */
    public static List<String> count(final Dataset<Row> frame, final int partitions) {
        return Executions.run(frame, "compactor: the DataFrame producer's counting pass",
                () -> frame.queryExecution().toRdd().toJavaRDD()
                        .mapPartitions((Iterator<InternalRow> rows) -> countTask(rows, partitions).iterator())
                        .collect());
    }

    private static List<String> countTask(final Iterator<InternalRow> rows, final int partitions) {
        final List<String> out = new ArrayList<>();
        if (!rows.hasNext()) {
            return out;
        }
        final long[] counts = new long[partitions];
        final List<String> bad = new ArrayList<>();
        final boolean[] seenKind = new boolean[32];
        int sparkPartition = -1;
        long row = 0;
        while (rows.hasNext()) {
            final InternalRow current = rows.next();
            row++;
            sparkPartition = current.getInt(0);
            final int kind = current.getInt(2);
            if (kind == 0) {
                counts[current.getInt(1)]++;
            } else if (kind < seenKind.length && !seenKind[kind]) {
                seenKind[kind] = true;
                bad.add(kind + ":" + row + ":" + (current.isNullAt(3) ? "" : Long.toString(current.getLong(3))));
            }
        }
        final StringBuilder line = new StringBuilder().append(sparkPartition).append('\t');
        for (int p = 0; p < partitions; p++) {
            line.append(p == 0 ? "" : ",").append(counts[p]);
        }
        line.append('\t').append(String.join(";", bad));
        out.add(line.toString());
        return out;
    }
}
