package compactor.udf;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.hadoop.fs.Path;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.hadoop.HadoopConfigurable;
import org.apache.iceberg.hadoop.HadoopOutputFile;
import org.apache.iceberg.io.FileAppender;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

import scala.collection.JavaConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction2;

/**
 * What a Spark task that writes files into an Iceberg table shares with the others ({@link TopicFiles},
 * {@link ViewFiles}): the files' names and locations, an open data file of one topic partition, and the clean-up
 * of files that will never be registered.
 */
final class TaskFiles {
    private TaskFiles() {
    }

    /**
     * A task's work over its rows, with its copy of the table: the lines of the files it wrote. It adds each file
     * it finished to {@code finished}, so that a failed job's files are deleted.
     */
    interface Work extends Serializable {
        List<String> write(Iterator<InternalRow> rows, Table table, CollectionAccumulator<String> finished)
                throws IOException;
    }

    /**
     * Run {@code work} over each partition of {@code frame}'s rows as one Spark job writing into {@code table}, in
     * a SQL execution named {@code name}; returns the tasks' lines in partition order. If the job fails, the files
     * of its finished tasks are deleted before the error is rethrown (a failed task deletes its own).
     */
    static List<String> run(final Dataset<?> frame, final Table table, final String name, final Work work) {
        final JavaSparkContext context = JavaSparkContext.fromSparkContext(frame.sparkSession().sparkContext());
        final Broadcast<Table> shared = context.broadcast(SerializableTable.copyOf(table));
        final CollectionAccumulator<String> finished = context.sc().collectionAccumulator(name);
        try {
            return Executions.run(frame, name, () -> {
                final RDD<InternalRow> rows = frame.queryExecution().toRdd();
                final Object results = rows.sparkContext().runJob(rows, new Job(work, shared, finished),
                        ClassTag$.MODULE$.apply(String[].class));
                final List<String> lines = new ArrayList<>();
                for (final String[] task : (String[][]) results) {
                    Collections.addAll(lines, task);
                }
                return lines;
            });
        } catch (Exception e) {  // Spark's SparkException is checked in Java, though Scala declares none
            deleteQuietly(table, finished.value());  // the write's own error is the one to report
            throw e;
        }
    }

    /** The table's columns of a writer's input: all but its last {@code extra} (the writer's own bookkeeping). */
    static StructType tableColumns(final Dataset<?> frame, final int extra) {
        final StructField[] fields = frame.schema().fields();
        return new StructType(Arrays.copyOf(fields, fields.length - extra));
    }

    /**
     * A job's function as a named class rather than a lambda: Spark's closure cleaner reads and parses the bytecode
     * of the class that defines a lambda (for {@code JavaRDD.mapPartitions}, Spark's own {@code JavaRDDLike}) at
     * every job, and leaves other functions alone.
     */
    private static final class Job extends AbstractFunction2<TaskContext, scala.collection.Iterator<InternalRow>,
            String[]> implements Serializable {
        private static final long serialVersionUID = 1L;
        private final Work work;
        private final Broadcast<Table> table;
        private final CollectionAccumulator<String> finished;

        Job(final Work work, final Broadcast<Table> table, final CollectionAccumulator<String> finished) {
            this.work = work;
            this.table = table;
            this.finished = finished;
        }

        @Override
        public String[] apply(final TaskContext context, final scala.collection.Iterator<InternalRow> rows) {
            try {
                return work.write(JavaConverters.asJavaIterator(rows), table.value(), finished)
                        .toArray(new String[0]);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** The start of this task's file names: {@code <spark partition>-<attempt>-<batch>}. */
    static String prefix(final String batch) {
        final TaskContext task = TaskContext.get();
        return String.format("%05d-%d-%s", task == null ? 0 : task.partitionId(),
                task == null ? 0 : task.taskAttemptId(), batch);
    }

    /** A new file's location in {@code table}'s data directory for topic partition {@code partition}. */
    static String location(final Table table, final String prefix, final int partition, final String kind) {
        final String name = prefix + "-" + partition + kind + "-" + UUID.randomUUID().toString().substring(0, 8)
                + ".parquet";
        return table.locationProvider().newDataLocation(table.spec(), partitionKey(table, partition), name);
    }

    /** The partition tuple of topic partition {@code partition} (the tables are partitioned by it alone). */
    static PartitionKey partitionKey(final Table table, final int partition) {
        final PartitionKey key = new PartitionKey(table.spec(), table.schema());
        key.set(0, partition);
        return key;
    }

    /**
     * Where to write the new file {@code path} of {@code table}: for a {@code file:} location of a table whose IO is
     * Hadoop's, through {@link LocalFiles} with the IO's configuration; else through the table's file IO.
     */
    static OutputFile output(final Table table, final String path) {
        final FileIO io = table.io();
        if (path.startsWith("file:") && io instanceof HadoopConfigurable) {
            // by path and configuration, as Iceberg's Parquet writer resolves the file system again from them
            return HadoopOutputFile.fromPath(new Path(path),
                    LocalFiles.configuration(((HadoopConfigurable) io).getConf()));
        }
        return io.newOutputFile(path);
    }

    /** The task's open data file of topic partition {@code partition} in {@code open}, opened on first use. */
    static DataFile fileOf(final Map<Integer, DataFile> open, final int partition, final Table table,
                           final StructType sparkType, final String prefix, final Map<String, String> overrides)
            throws IOException {
        DataFile file = open.get(partition);
        if (file == null) {
            file = new DataFile(table, sparkType, prefix, partition, overrides);
            open.put(partition, file);
        }
        return file;
    }

    /**
     * After a failed task: close its {@code open} data files, then delete them and the other files it
     * {@code wrote} (none is registered anywhere).
     */
    static void abandon(final Table table, final Collection<DataFile> open, final List<String> wrote) {
        final List<String> paths = new ArrayList<>(wrote);
        for (final DataFile file : open) {
            file.abandon();
            paths.add(file.path);
        }
        deleteQuietly(table, paths);
    }

    /** Delete the files at {@code paths}; one that cannot be deleted is left to orphan cleanup (never registered). */
    static void deleteQuietly(final Table table, final Iterable<String> paths) {
        for (final String path : paths) {
            try {
                table.io().deleteFile(path);
            } catch (RuntimeException ignored) {
                // left to orphan cleanup
            }
        }
    }

    /** One open data file of one topic partition in one task, written through Iceberg's Parquet writer. */
    static final class DataFile {
        final String path;
        final int partition;
        final FileAppender<InternalRow> appender;
        long rows;
        long recordBytes;

        /** {@code sparkType}: the rows' columns that are the table's, in its schema's order (more may follow). */
        DataFile(final Table table, final StructType sparkType, final String prefix, final int partition,
                 final Map<String, String> overrides) throws IOException {
            this.path = location(table, prefix, partition, "");
            this.partition = partition;
            final Map<String, String> settings = new HashMap<>(table.properties());
            settings.putAll(overrides);
            this.appender = Parquet.write(output(table, path))
                    .schema(table.schema())
                    .createWriterFunc(type -> SparkParquetWriters.buildWriter(sparkType, type))
                    .setAll(settings)
                    .metricsConfig(MetricsConfig.forTable(table))
                    .overwrite()
                    .build();
        }

        void add(final InternalRow row, final long size) {
            appender.add(row);
            rows++;
            recordBytes += size;
        }

        /** Close the file; its line: {@code path \t partition \t rows \t bytes \t record bytes}. */
        String close() throws IOException {
            appender.close();
            return path + "\t" + partition + "\t" + rows + "\t" + appender.length() + "\t" + recordBytes;
        }

        /** Close the file after a failure, ignoring errors (the task fails with its first one). */
        void abandon() {
            try {
                appender.close();  // a no-op once closed
            } catch (IOException | RuntimeException ignored) {
                // the task fails with its first error
            }
        }
    }
}
