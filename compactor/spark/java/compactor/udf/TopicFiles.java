package compactor.udf;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.io.FileAppender;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * A topic's data files written straight from Spark's rows: each task writes, per topic partition it holds, one
 * Parquet file through Iceberg's own Parquet writer (the topic's schema and field ids, its write properties and
 * metrics settings), and returns one line per file for the driver to register in the topic's single commit.
 *
 * <p>Iceberg's partitioned Spark writer computes a partition key and looks up a writer for every row; here the
 * topic partition is the row's first column, an int, and routes the row to one of the task's open files. The
 * rows of one topic partition arrive in offset order within a task (the DataFrame producer numbers them as they
 * stream by), so each file holds one partition and a contiguous offset range. Nothing is committed here: files
 * of a failed or speculative attempt are never registered and are left to orphan cleanup.
 */
public final class TopicFiles {
    private TopicFiles() {
    }

    /**
     * Write {@code frame} (the topic's columns in schema order: partition int, offset, timestamp, key, value,
     * headers) into new data files of {@code table}; returns {@code path \t partition \t rows \t bytes} per file.
     * {@code properties} override the table's write properties (for example the row-group size).
     */
    public static List<String> write(final Dataset<Row> frame, final Table table, final String batch,
                                     final Map<String, String> properties) {
        final JavaSparkContext context = JavaSparkContext.fromSparkContext(frame.sparkSession().sparkContext());
        final Broadcast<Table> shared = context.broadcast(SerializableTable.copyOf(table));
        final StructType sparkType = frame.schema();
        final Map<String, String> overrides = new HashMap<>(properties);
        return frame.queryExecution().toRdd().toJavaRDD()
                .mapPartitions((Iterator<InternalRow> rows) -> writeTask(rows, shared.value(), sparkType, batch,
                        overrides).iterator())
                .collect();
    }

    private static List<String> writeTask(final Iterator<InternalRow> rows, final Table table,
                                          final StructType sparkType, final String batch,
                                          final Map<String, String> overrides) {
        final TaskContext task = TaskContext.get();
        final String prefix = String.format("%05d-%d-%s", task == null ? 0 : task.partitionId(),
                task == null ? 0 : task.taskAttemptId(), batch);
        final Map<Integer, Open> open = new HashMap<>();
        final List<String> out = new ArrayList<>();
        try {
            while (rows.hasNext()) {
                final InternalRow row = rows.next();
                final int partition = row.getInt(0);
                Open file = open.get(partition);
                if (file == null) {
                    file = new Open(table, sparkType, prefix, partition, overrides);
                    open.put(partition, file);
                }
                file.appender.add(row);
                file.rows++;
            }
            for (final Open file : open.values()) {
                file.appender.close();
                out.add(file.path + "\t" + file.partition + "\t" + file.rows + "\t" + file.appender.length());
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            for (final Open file : open.values()) {
                try {
                    file.appender.close();  // a no-op once closed
                } catch (IOException | RuntimeException ignored) {
                    // the task fails with its first error; these files are never registered
                }
            }
        }
    }

    /** One open data file of one topic partition in one task. */
    private static final class Open {
        private final String path;
        private final int partition;
        private final FileAppender<InternalRow> appender;
        private long rows;

        Open(final Table table, final StructType sparkType, final String prefix, final int partition,
             final Map<String, String> overrides) throws IOException {
            final Schema schema = table.schema();
            final PartitionSpec spec = table.spec();
            final PartitionKey key = new PartitionKey(spec, schema);
            key.set(0, partition);
            final String name = prefix + "-" + partition + "-" + UUID.randomUUID().toString().substring(0, 8)
                    + ".parquet";
            this.path = table.locationProvider().newDataLocation(spec, key, name);
            this.partition = partition;
            final OutputFile output = table.io().newOutputFile(path);
            final Map<String, String> settings = new HashMap<>(table.properties());
            settings.putAll(overrides);
            this.appender = Parquet.write(output)
                    .schema(schema)
                    .createWriterFunc(type -> SparkParquetWriters.buildWriter(sparkType, type))
                    .setAll(settings)
                    .metricsConfig(MetricsConfig.forTable(table))
                    .overwrite()
                    .build();
        }
    }
}
