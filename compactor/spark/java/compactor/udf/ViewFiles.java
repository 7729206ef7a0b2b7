package compactor.udf;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.Table;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.parquet.Parquet;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.CollectionAccumulator;

/**
 * An incremental compaction run's new files, written from Spark's tasks: the kept rows of the new range as data
 * files of the compacted table, and the positions of the compacted rows the run removes as position-delete files.
 *
 * <p>The input rows are the table's columns in schema order, then {@code _file} and {@code _pos}. A row with a
 * {@code _file} is a position to delete (its partition is the first column; the rest is ignored); any other is a
 * kept row. (The run's append pass writes only kept rows, its delete pass only positions.) Each task writes, per
 * topic partition it holds, one data file through Iceberg's Parquet writer, and its positions into position-delete
 * files sorted by file and position as the spec requires: a task buffers them (a data file's path once, its
 * positions as longs) and sorts them at its end, or whenever a given number have gathered, each flush a file per
 * partition, so a task's memory stays bounded whatever share of the view the run removes.
 *
 * <p>Nothing is committed: each task returns one line per file, for the driver to register in the run's cursor
 * commit. A failed task deletes its files; when the job fails, the files of its finished tasks are deleted before
 * the error is rethrown. Files of a speculative attempt, or of a driver that died, are never registered and are
 * left to orphan cleanup.
 */
public final class ViewFiles {
    private ViewFiles() {
    }

    /** A data file's line starts with this: {@code data \t path \t partition \t rows \t bytes \t record bytes}. */
    public static final String DATA = "data";
    /** A delete file's: {@code deletes \t path \t partition \t positions \t bytes \t first path \t last path}. */
    public static final String DELETES = "deletes";
    /** The data files are written with the table's own write properties. */
    private static final Map<String, String> NO_OVERRIDES = Collections.emptyMap();
    /**
     * Write {@code frame} (see the class comment; its last two columns are {@code _file} and {@code _pos}) into
     * new files of {@code table}; returns their lines. {@code batch} goes into the files' names; a task writes
     * out its positions whenever {@code flushPositions} have gathered.
     */
    public static List<String> write(final Dataset<Row> frame, final Table table, final String batch,
                                     final int flushPositions) {
        final StructType sparkType = TaskFiles.tableColumns(frame, 2);  // less _file and _pos
        return TaskFiles.run(frame, table, "compactor: an incremental run's files",
                (rows, copy, finished) -> writeTask(rows, copy, sparkType, batch, flushPositions, finished));
    }

    private static List<String> writeTask(final Iterator<InternalRow> rows, final Table table,
                                          final StructType sparkType, final String batch,
                                          final int flushPositions, final CollectionAccumulator<String> finished)
            throws IOException {
        final TaskContext task = TaskContext.get();
        final String prefix = TaskFiles.prefix(batch);
        final int fileColumn = sparkType.fields().length;
        final Map<Integer, TaskFiles.DataFile> open = new HashMap<>();
        final Positions positions = new Positions();
        final List<String> out = new ArrayList<>();
        final List<String> written = new ArrayList<>();
        boolean done = false;
        try {
            while (rows.hasNext()) {
                final InternalRow row = rows.next();
                final int partition = row.getInt(0);
                if (!row.isNullAt(fileColumn)) {
                    positions.add(partition, row.getUTF8String(fileColumn), row.getLong(fileColumn + 1));
                    if (positions.size >= flushPositions) {
                        positions.flush(table, prefix, out, written);
                    }
                    continue;
                }
                TaskFiles.fileOf(open, partition, table, sparkType, prefix, NO_OVERRIDES).add(row, 0);
            }
            if (task != null) {
                task.killTaskIfInterrupted();  // the job failed meanwhile: this task's files go too
            }
            positions.flush(table, prefix, out, written);
            for (final TaskFiles.DataFile file : open.values()) {
                out.add(DATA + "\t" + file.close());
                written.add(file.path);
            }
            for (final String path : written) {
                finished.add(path);
            }
            done = true;
            return out;
        } finally {
            if (!done) {
                TaskFiles.abandon(table, open.values(), written);
            }
        }
    }

    /** A task's positions to delete, per topic partition and data file, until they are written out. */
    private static final class Positions {
        private final TreeMap<Integer, TreeMap<String, LongList>> byPartition = new TreeMap<>();
        private UTF8String lastFile;
        private int lastPartition;
        private LongList last;
        int size;

        void add(final int partition, final UTF8String file, final long pos) {
            if (last == null || partition != lastPartition || !file.equals(lastFile)) {
                // a task reads each data file's rows together: one lookup per file, not per row
                lastFile = file.clone();
                lastPartition = partition;
                last = byPartition.computeIfAbsent(partition, p -> new TreeMap<>())
                        .computeIfAbsent(file.toString(), f -> new LongList());
            }
            last.add(pos);
            size++;
        }

        /** Write what is held, one position-delete file per partition, sorted by file and position. */
        void flush(final Table table, final String prefix, final List<String> out, final List<String> written)
                throws IOException {
            for (final Map.Entry<Integer, TreeMap<String, LongList>> entry : byPartition.entrySet()) {
                final int partition = entry.getKey();
                final String path = TaskFiles.location(table, prefix, partition, "-deletes");
                written.add(path);
                final PositionDeleteWriter<Object> writer = Parquet.writeDeletes(TaskFiles.output(table, path))
                        .withSpec(table.spec())
                        .withPartition(TaskFiles.partitionKey(table, partition))
                        .setAll(table.properties())
                        .metricsConfig(MetricsConfig.forPositionDelete(table))
                        .overwrite()
                        .buildPositionWriter();
                final PositionDelete<Object> delete = PositionDelete.create();
                long rows = 0;
                try {
                    for (final Map.Entry<String, LongList> file : entry.getValue().entrySet()) {
                        final LongList held = file.getValue();
                        Arrays.sort(held.values, 0, held.size);
                        for (int i = 0; i < held.size; i++) {
                            writer.write(delete.set(file.getKey(), held.values[i]));
                        }
                        rows += held.size;
                    }
                } finally {
                    writer.close();
                }
                out.add(DELETES + "\t" + path + "\t" + partition + "\t" + rows + "\t" + writer.length() + "\t"
                        + entry.getValue().firstKey() + "\t" + entry.getValue().lastKey());
            }
            byPartition.clear();
            last = null;
            lastFile = null;
            size = 0;
        }
    }

    /** A growable array of longs. */
    private static final class LongList {
        private long[] values = new long[16];
        private int size;

        void add(final long value) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = value;
        }
    }
}
