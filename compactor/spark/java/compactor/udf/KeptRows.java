package compactor.udf;

import java.util.HashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.function.IntFunction;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.LongAccumulator;

import scala.collection.AbstractIterator;
import scala.collection.Iterator;

/**
 * The full rows of a range that the compacted view can keep, given the partitions' winners: each keyed row whose
 * offset is its key's latest, and every keyless row (the caller's rules decide on tombstones and keyless rows). It
 * counts the rows it reads, and those the caller flagged as tombstones, for the run's statistics, and checks the
 * rows against those the winners were found in (per partition: the count and the sum of the offsets' mixes), either
 * at the end of the task (the task read whole partitions: {@code report} is null) or, where a partition's rows are
 * read by several tasks, by reporting the task's figures to {@code report} as {@code [partition, rows, mix]} for the
 * driver to sum ({@link RangeWinners.Result}).
 */
final class KeptRows extends AbstractIterator<InternalRow> {
    private final Iterator<InternalRow> rows;
    private final IntFunction<OffsetMasks> masks;
    private final Map<Integer, OffsetMasks> checked;
    private final int partitionColumn;
    private final int keyColumn;
    private final int offsetColumn;
    private final int tombstoneColumn;
    private final LongAccumulator records;
    private final LongAccumulator tombstones;
    private final CollectionAccumulator<long[]> report;
    private final Map<Integer, long[]> counted = new HashMap<>();  // partition -> rows, mix
    private long seen;
    private long seenTombstones;
    private int lastPartition = Integer.MIN_VALUE;
    private OffsetMasks last;
    private long[] lastCount;
    private InternalRow next;
    private boolean done;

    /** Rows checked at the end of the task against {@code masks}, every partition of which they must hold.
     * {@code columns}: the indexes of {@code partition, key, offset} and the tombstone flag in the rows. */
    KeptRows(final Iterator<InternalRow> rows, final Map<Integer, OffsetMasks> masks, final int[] columns,
             final LongAccumulator records, final LongAccumulator tombstones) {
        this(rows, masks::get, masks, columns, records, tombstones, null);
    }

    /** Rows whose figures go to {@code report}, with each partition's masks from {@code masks} (null: not read). */
    KeptRows(final Iterator<InternalRow> rows, final IntFunction<OffsetMasks> masks, final int[] columns,
             final LongAccumulator records, final LongAccumulator tombstones,
             final CollectionAccumulator<long[]> report) {
        this(rows, masks, null, columns, records, tombstones, report);
    }

    private KeptRows(final Iterator<InternalRow> rows, final IntFunction<OffsetMasks> masks,
                     final Map<Integer, OffsetMasks> checked, final int[] columns, final LongAccumulator records,
                     final LongAccumulator tombstones, final CollectionAccumulator<long[]> report) {
        this.rows = rows;
        this.masks = masks;
        this.checked = checked;
        this.partitionColumn = columns[0];
        this.keyColumn = columns[1];
        this.offsetColumn = columns[2];
        this.tombstoneColumn = columns[3];
        this.records = records;
        this.tombstones = tombstones;
        this.report = report;
    }

    @Override
    public boolean hasNext() {
        while (next == null && !done) {
            if (!rows.hasNext()) {
                finish();
            } else {
                final InternalRow row = rows.next();
                if (kept(row)) {
                    next = row;
                }
            }
        }
        return next != null;
    }

    @Override
    public InternalRow next() {
        if (!hasNext()) {
            throw new NoSuchElementException();
        }
        final InternalRow out = next;
        next = null;
        return out;
    }

    private boolean kept(final InternalRow row) {
        final int partition = row.getInt(partitionColumn);
        if (partition != lastPartition || last == null) {
            last = masks.apply(partition);
            lastPartition = partition;
            if (last == null) {
                throw new IllegalStateException("partition " + partition + " was not read for its winners in "
                        + "task " + TaskContext.getPartitionId());
            }
            lastCount = counted.computeIfAbsent(partition, p -> new long[2]);
        }
        final long offset = row.getLong(offsetColumn);
        lastCount[0]++;
        lastCount[1] += OffsetMasks.mix(offset);
        seen++;
        if (row.getBoolean(tombstoneColumn)) {
            seenTombstones++;
        }
        return row.isNullAt(keyColumn) || last.latest(offset);
    }

    private void finish() {
        done = true;
        if (report == null) {
            for (final Map.Entry<Integer, OffsetMasks> entry : checked.entrySet()) {
                final long[] count = counted.getOrDefault(entry.getKey(), new long[2]);
                final OffsetMasks held = entry.getValue();
                RangeWinners.check(entry.getKey(), held.rows, held.digest, count[0], count[1]);
            }
        } else {
            for (final Map.Entry<Integer, long[]> entry : counted.entrySet()) {
                report.add(new long[] {entry.getKey(), entry.getValue()[0], entry.getValue()[1]});
            }
        }
        records.add(seen);
        tombstones.add(seenTombstones);
    }
}
