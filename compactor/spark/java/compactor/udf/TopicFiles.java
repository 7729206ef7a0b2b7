package compactor.udf;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import org.apache.iceberg.Table;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

/**
 * A topic's data files written straight from Spark's rows: each task writes, per topic partition it holds, one
 * Parquet file through Iceberg's own Parquet writer (the topic's schema and field ids, its write properties and
 * metrics settings), and returns one line per file for the driver to register in the topic's single commit.
 *
 * <p>Iceberg's partitioned Spark writer computes a partition key and looks up a writer for every row; here the
 * topic partition is the row's first column, an int, and routes the row to one of the task's open files. The
 * rows of one topic partition arrive in offset order within a task (the DataFrame producer numbers them as they
 * stream by), so each file holds one partition and a contiguous offset range.
 *
 * <p>The seventh column is each record's size (key, value and headers, as the producer counts them): the file's
 * line reports their sum, and a record over {@code maxRecordBytes} fails the write with {@link #TOO_LARGE} in its
 * message (its size, Spark partition and row), so the producer's counting pass need not read the values. The
 * eighth is the row's {@code monotonically_increasing_id()} in the producer's input, which names the Spark
 * partition and row whatever task writes it (the write may read the input as several copies, each writing a part).
 *
 * <p>Nothing is committed here. A task that meets an oversized record deletes its files and returns the record's
 * marker instead of its files' lines; the job thus ends with every task's files known, and the driver deletes
 * them all before it throws for the first such record (in the input's order). A failed task deletes the files it
 * opened; when the job fails, the files of its finished tasks (gathered in an accumulator) are deleted before the
 * error is rethrown. Files of a speculative attempt, or of a driver that died, are never registered and are left
 * to orphan cleanup.
 */
public final class TopicFiles {
    private TopicFiles() {
    }

    /** The marker of an oversized record's error: {@code TOO_LARGE[bytes spark-partition row]}. */
    public static final String TOO_LARGE = "compactor.udf.TopicFiles.TOO_LARGE";
    /** {@code monotonically_increasing_id()}: the Spark partition above these bits, the position below. */
    private static final int ROW_BITS = 33;

    /**
     * Write {@code frame} (the topic's columns in schema order: partition int, offset, timestamp, key, value,
     * headers; then each record's size and its row id, longs) into new data files of {@code table}; returns
     * {@code path \t partition \t rows \t bytes \t record bytes} per file. {@code properties} override the
     * table's write properties (for example the row-group size); {@code maxRecordBytes} is the largest record
     * allowed.
     */
    public static List<String> write(final Dataset<Row> frame, final Table table, final String batch,
                                     final Map<String, String> properties, final long maxRecordBytes) {
        final StructType sparkType = TaskFiles.tableColumns(frame, 2);  // less the record size and the row id
        final Map<String, String> overrides = new HashMap<>(properties);
        final List<String> lines = TaskFiles.run(frame, table, "compactor: the DataFrame producer's files",
                (rows, copy, finished) -> writeTask(rows, copy, sparkType, batch, overrides, maxRecordBytes,
                        finished));
        // An oversized record is a task's result, not its failure: the job ends with every task's files known
        // (a failed job would not wait for its running tasks), so none is left behind.
        String oversized = null;
        long first = Long.MAX_VALUE;
        for (final String line : lines) {
            if (line.startsWith(TOO_LARGE)) {
                final String[] fields = line.substring(TOO_LARGE.length() + 1, line.length() - 1).split(" ");
                final long position = (Long.parseLong(fields[1]) << ROW_BITS) + Long.parseLong(fields[2]);
                if (position < first) {
                    first = position;
                    oversized = line;
                }
            }
        }
        if (oversized == null) {
            return lines;
        }
        final List<String> written = new ArrayList<>();
        for (final String line : lines) {
            if (!line.startsWith(TOO_LARGE)) {
                written.add(line.substring(0, line.indexOf('\t')));
            }
        }
        TaskFiles.deleteQuietly(table, written);  // the record's error is the one to report
        throw new IllegalArgumentException(oversized);
    }

    private static List<String> writeTask(final Iterator<InternalRow> rows, final Table table,
                                          final StructType sparkType, final String batch,
                                          final Map<String, String> overrides, final long maxRecordBytes,
                                          final CollectionAccumulator<String> finished) throws IOException {
        final TaskContext task = TaskContext.get();
        final String prefix = TaskFiles.prefix(batch);
        final int sizeColumn = sparkType.fields().length;
        final Map<Integer, TaskFiles.DataFile> open = new HashMap<>();
        final List<String> out = new ArrayList<>();
        boolean done = false;
        try {
            while (rows.hasNext()) {
                final InternalRow row = rows.next();
                final long size = row.getLong(sizeColumn);
                if (size > maxRecordBytes) {  // this task's files are deleted below (not done)
                    final long id = row.getLong(sizeColumn + 1);  // (Spark partition << 33) + position
                    return Collections.singletonList(TOO_LARGE + "[" + size + " " + (id >>> ROW_BITS) + " "
                            + ((id & ((1L << ROW_BITS) - 1)) + 1) + "]");
                }
                final int partition = row.getInt(0);
                TaskFiles.fileOf(open, partition, table, sparkType, prefix, overrides).add(row, size);
            }
            if (task != null) {
                task.killTaskIfInterrupted();  // the job failed meanwhile: this task's files go too
            }
            for (final TaskFiles.DataFile file : open.values()) {
                out.add(file.close());
            }
            for (final TaskFiles.DataFile file : open.values()) {
                finished.add(file.path);
            }
            done = true;
            return out;
        } finally {
            if (!done) {
                TaskFiles.abandon(table, open.values(), Collections.emptyList());
            }
        }
    }
}
