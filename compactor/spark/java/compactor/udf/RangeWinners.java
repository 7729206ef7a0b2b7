package compactor.udf;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;

import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.util.LongAccumulator;

import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.Tuple2;
import scala.runtime.AbstractFunction2;

/**
 * Phase 1 and the append pass's winner test in one task: each key's latest record among a range's rows, found
 * without Spark's hash aggregation.
 *
 * <p>{@link #keep} takes two reads of the same raw range, grouped alike (the partitioned layout: one task per
 * topic partition, the same files in the same order): its narrow columns ({@code partition, key, offset}) and its
 * full rows. Each task first reads its narrow rows into a hash table of the exact key bytes (an open-addressing
 * table of 64-bit hashes and references into an arena of the keys, each with its highest offset; a hash match is
 * confirmed on the key's bytes, so a collision never merges two keys), then turns the keys' offsets into one bit per
 * offset of the range, then streams its full rows and passes on those the view can keep: each key's latest, and the
 * keyless ones (the caller's rules decide on tombstones and keyless rows). It counts the rows it reads and those the
 * caller flagged as tombstones, for the run's statistics.
 * Compared with Spark's aggregation of {@code (partition, key) -> max(offset)} and the join of offset masks, no
 * grouping row is built or copied per record and a hit touches one slot and one arena record.
 *
 * <p>The table lives in the task's heap, outside Spark's memory manager: about 16 bytes a slot and 16 bytes plus
 * the key a record, so the caller bounds the records a task reads by the memory a task may count on
 * ({@link #taskMemory}). The two
 * reads are checked against each other: a full row of a partition or an offset the narrow rows did not cover, or
 * other rows of a partition (its row count or the sum of a hash of its offsets differs), fails the task rather than
 * keep or drop a row wrongly.
 *
 * <p>The result is a DataFrame over the zipped reads ({@code SparkSession.internalCreateDataFrame}, Spark's own
 * way to give a DataFrame an RDD of its internal rows: this class is the project's one use of it).
 */
public final class RangeWinners {
    private RangeWinners() {
    }

    /**
     * The rows of {@code full} that the compacted view can keep: each keyed row that is its key's latest in the
     * range, found from {@code narrow}'s rows (columns {@code partition, key, offset}, in that order) of the same
     * task, and every keyless row (the caller's rules decide on those). {@code full} must have {@code partition},
     * {@code key} and {@code offset} columns and the boolean column {@code tombstone}, which the caller computes by
     * its own rule; the result counts the rows read and those flagged there. {@code hashBits} keeps that many low
     * bits of each key's 64-bit hash (64 but in tests, which make keys collide with fewer).
     */
    public static Result keep(final Dataset<Row> narrow, final Dataset<Row> full, final String tombstone,
                              final int hashBits) {
        if (hashBits < 0 || hashBits > 64) {
            throw new IllegalArgumentException("hashBits must be within 0..64, not " + hashBits);
        }
        if (!Arrays.equals(narrow.schema().fieldNames(), new String[] {"partition", "key", "offset"})) {
            throw new IllegalArgumentException("the narrow rows' columns must be partition, key, offset, not "
                    + Arrays.toString(narrow.schema().fieldNames()));
        }
        final StructType schema = full.schema();
        final int[] columns = {schema.fieldIndex("partition"), schema.fieldIndex("key"), schema.fieldIndex("offset"),
                               schema.fieldIndex(tombstone)};
        final SparkSession session = full.sparkSession();
        final LongAccumulator records = session.sparkContext().longAccumulator("compactor: range records");
        final LongAccumulator tombstones = session.sparkContext().longAccumulator("compactor: range tombstones");
        final RDD<InternalRow> keys = narrow.queryExecution().toRdd();
        final RDD<InternalRow> rows = full.queryExecution().toRdd();
        final ClassTag<InternalRow> tag = ClassTag$.MODULE$.apply(InternalRow.class);
        final long hashMask = hashBits == 64 ? -1L : (1L << hashBits) - 1;
        final RDD<InternalRow> zipped = keys.zipPartitions(rows, false,
                new Zip(columns, hashMask, records, tombstones), tag, tag);
        return new Result(session.internalCreateDataFrame(zipped, schema, false), records, tombstones);
    }

    /** What {@link #keep} returns: the rows, and the counts of the range's rows that the job reading them fills. */
    public static final class Result {
        private final Dataset<Row> rows;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;

        Result(final Dataset<Row> rows, final LongAccumulator records, final LongAccumulator tombstones) {
            this.rows = rows;
            this.records = records;
            this.tombstones = tombstones;
        }

        /** The rows the view can keep, in {@code full}'s columns. */
        public Dataset<Row> rows() {
            return rows;
        }

        /** The range's rows read, once a job has read {@link #rows}. */
        public long records() {
            return records.value();
        }

        /** The range's rows flagged as tombstones, once a job has read {@link #rows}. */
        public long tombstones() {
            return tombstones.value();
        }
    }

    /**
     * The execution memory a task may count on, in bytes: Spark's unified memory (its storage and execution pool)
     * of the smallest executor, divided among that executor's share of the application's task slots; in local mode
     * the driver's, among all of them. 0 while no executor has registered.
     */
    public static long taskMemory(final SparkSession session) {
        final SparkContext context = session.sparkContext();
        final scala.collection.Iterator<Tuple2<String, Tuple2<Object, Object>>> status =
                context.getExecutorMemoryStatus().iterator();
        final String driver = SparkEnv.get().blockManager().blockManagerId().hostPort();
        final boolean local = context.isLocal();
        long smallest = Long.MAX_VALUE;
        int executors = 0;
        while (status.hasNext()) {
            final Tuple2<String, Tuple2<Object, Object>> entry = status.next();
            if (local || !entry._1().equals(driver)) {
                smallest = Math.min(smallest, (Long) entry._2()._1());
                executors++;
            }
        }
        if (executors == 0) {
            return 0;
        }
        final int slots = Math.max(context.defaultParallelism(), 1);
        return smallest / Math.max((slots + executors - 1) / executors, 1);
    }

    /** An offset's 64-bit mix (SplitMix64's finaliser): sums of mixes tell two reads' offsets apart. */
    static long mix(final long offset) {
        long z = offset * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** The task's function, a named class (Spark's closure cleaner parses the bytecode of a lambda's class). */
    private static final class Zip extends AbstractFunction2<Iterator<InternalRow>, Iterator<InternalRow>,
            Iterator<InternalRow>> implements Serializable {
        private static final long serialVersionUID = 1L;
        private final int[] columns;
        private final long hashMask;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;

        Zip(final int[] columns, final long hashMask, final LongAccumulator records,
            final LongAccumulator tombstones) {
            this.columns = columns.clone();
            this.hashMask = hashMask;
            this.records = records;
            this.tombstones = tombstones;
        }

        @Override
        public Iterator<InternalRow> apply(final Iterator<InternalRow> narrow, final Iterator<InternalRow> full) {
            final KeyTable table = new KeyTable(hashMask);
            while (narrow.hasNext()) {
                table.add(narrow.next());
            }
            return new Kept(full, table.masks(), columns, records, tombstones);
        }
    }

    /**
     * A partition's winners: a bit per offset, set for each latest one, and its narrow rows' count. The bits are an
     * array over the partition's offsets from its lowest, or a map of 64-bit words where the offsets are sparse
     * (a mirrored topic's gaps), so memory follows the rows, never the offsets' span.
     */
    static final class Masks {
        final long first;
        final long rows;
        final long digest;  // the sum of mix(offset) over the narrow rows: the full rows must give the same
        private final long[] words;
        private final Map<Long, long[]> sparse;
        long seen;
        long seenDigest;

        Masks(final long first, final long last, final long rows, final long digest) {
            this.first = first;
            this.rows = rows;
            this.digest = digest;
            final long span = ((last - first) >>> 6) + 1;
            this.words = span <= 2 * rows + 1024 ? new long[(int) span] : null;
            this.sparse = words == null ? new HashMap<>() : null;
        }

        void set(final long offset) {
            final long at = offset - first;
            if (words != null) {
                words[(int) (at >>> 6)] |= 1L << (at & 63);
            } else {
                sparse.computeIfAbsent(at >>> 6, w -> new long[1])[0] |= 1L << (at & 63);
            }
        }

        boolean latest(final long offset) {
            final long at = offset - first;
            if (at < 0 || (words != null && (at >>> 6) >= words.length)) {
                throw new IllegalStateException("offset " + offset + " is outside the range read for its winners");
            }
            final long word;
            if (words != null) {
                word = words[(int) (at >>> 6)];
            } else {
                final long[] held = sparse.get(at >>> 6);
                word = held == null ? 0 : held[0];
            }
            return (word & (1L << (at & 63))) != 0;
        }
    }

    /**
     * The latest offset of each (partition, key) of a task's narrow rows: an open-addressing table of
     * {@code (hash, arena reference)} pairs with linear probing, and an arena of records {@code [partition: int,
     * length: int, offset: long, key bytes]} in chunks, written in first-seen order.
     */
    static final class KeyTable {
        private static final int CHUNK = 1 << 22;
        private static final long SEED = 42L;
        private long[] slots = new long[2 << 16];  // hash, reference (chunk << 32 | position + 1; 0 = empty)
        private int mask = (1 << 16) - 1;
        private int size;
        private final List<byte[]> chunks = new ArrayList<>();
        private byte[] chunk;
        private final List<Integer> fills = new ArrayList<>();  // bytes used of each full chunk
        private int used;
        // per partition: rows, lowest and highest offset, the sum of the offsets' mixes (Masks.digest)
        private final Map<Integer, long[]> partitions = new HashMap<>();
        private final long hashMask;
        private int lastPartition = Integer.MIN_VALUE;
        private long[] last;

        KeyTable(final long hashMask) {
            this.hashMask = hashMask;
        }

        void add(final InternalRow row) {
            final int partition = row.getInt(0);
            if (partition != lastPartition || last == null) {
                lastPartition = partition;
                last = partitions.computeIfAbsent(partition, p -> new long[] {0, Long.MAX_VALUE, Long.MIN_VALUE, 0});
            }
            final long offset = row.getLong(2);
            last[0]++;
            last[1] = Math.min(last[1], offset);
            last[2] = Math.max(last[2], offset);
            last[3] += mix(offset);
            if (row.isNullAt(1)) {
                return;
            }
            final Object base;
            final long address;
            final int length;
            if (row instanceof UnsafeRow) {
                final UnsafeRow unsafe = (UnsafeRow) row;
                final long offsetAndSize = unsafe.getLong(1);
                base = unsafe.getBaseObject();
                address = unsafe.getBaseOffset() + (offsetAndSize >>> 32);
                length = (int) offsetAndSize;
            } else {
                final byte[] key = row.getBinary(1);
                base = key;
                address = Platform.BYTE_ARRAY_OFFSET;
                length = key.length;
            }
            final long hash = XXH64.hashUnsafeBytes(base, address, length, SEED + partition) & hashMask;
            int at = (int) (hash ^ (hash >>> 32)) & mask;
            while (true) {
                final long reference = slots[2 * at + 1];
                if (reference == 0) {
                    slots[2 * at] = hash;
                    slots[2 * at + 1] = append(partition, offset, base, address, length);
                    if (++size > (mask + 1) * 3L / 4) {
                        grow();
                    }
                    return;
                }
                if (slots[2 * at] == hash) {
                    final byte[] records = chunks.get((int) (reference >>> 32));
                    final int position = (int) reference - 1;
                    if (Platform.getInt(records, Platform.BYTE_ARRAY_OFFSET + position) == partition
                            && Platform.getInt(records, Platform.BYTE_ARRAY_OFFSET + position + 4) == length
                            && ByteArrayMethods.arrayEquals(records, Platform.BYTE_ARRAY_OFFSET + position + 16,
                                    base, address, length)) {
                        final long stored = Platform.getLong(records, Platform.BYTE_ARRAY_OFFSET + position + 8);
                        if (offset > stored) {
                            Platform.putLong(records, Platform.BYTE_ARRAY_OFFSET + position + 8, offset);
                        }
                        return;
                    }
                }
                at = (at + 1) & mask;
            }
        }

        private long append(final int partition, final long offset, final Object base, final long address,
                            final int length) {
            final int need = 16 + ((length + 7) & ~7);
            if (chunk == null || used + need > chunk.length) {
                if (chunk != null) {
                    fills.add(used);
                }
                chunk = new byte[Math.max(CHUNK, need)];
                chunks.add(chunk);
                used = 0;
            }
            final long at = Platform.BYTE_ARRAY_OFFSET + used;
            Platform.putInt(chunk, at, partition);
            Platform.putInt(chunk, at + 4, length);
            Platform.putLong(chunk, at + 8, offset);
            Platform.copyMemory(base, address, chunk, at + 16, length);
            final long reference = ((long) (chunks.size() - 1) << 32) | (used + 1);
            used += need;
            return reference;
        }

        private void grow() {
            final long[] old = slots;
            slots = new long[old.length * 2];
            mask = (mask << 1) | 1;
            for (int i = 0; i < old.length; i += 2) {
                if (old[i + 1] != 0) {
                    int at = (int) (old[i] ^ (old[i] >>> 32)) & mask;
                    while (slots[2 * at + 1] != 0) {
                        at = (at + 1) & mask;
                    }
                    slots[2 * at] = old[i];
                    slots[2 * at + 1] = old[i + 1];
                }
            }
        }

        /** Each partition's winners as bits, from the arena (read in order, not through the table). */
        Map<Integer, Masks> masks() {
            final Map<Integer, Masks> out = new HashMap<>();
            for (final Map.Entry<Integer, long[]> entry : partitions.entrySet()) {
                final long[] seen = entry.getValue();
                out.put(entry.getKey(), new Masks(seen[1], seen[2], seen[0], seen[3]));
            }
            slots = null;  // the table is done with; the arena is read once more, in order
            for (int c = 0; c < chunks.size(); c++) {
                final byte[] records = chunks.get(c);
                final int end = c == chunks.size() - 1 ? used : fills.get(c);
                int position = 0;
                while (position < end) {
                    final long at = Platform.BYTE_ARRAY_OFFSET + position;
                    out.get(Platform.getInt(records, at)).set(Platform.getLong(records, at + 8));
                    position += 16 + ((Platform.getInt(records, at + 4) + 7) & ~7);
                }
            }
            chunks.clear();
            return out;
        }
    }

    /**
     * The full rows the view can keep (keyed latest ones, and keyless ones), counted and checked against the narrow
     * rows' partitions, offsets and counts as they pass.
     */
    private static final class Kept extends AbstractIterator<InternalRow> {
        private final Iterator<InternalRow> rows;
        private final Map<Integer, Masks> masks;
        private final int partitionColumn;
        private final int keyColumn;
        private final int offsetColumn;
        private final int tombstoneColumn;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;
        private long seen;
        private long seenTombstones;
        private int lastPartition = Integer.MIN_VALUE;
        private Masks last;
        private InternalRow next;
        private boolean done;

        Kept(final Iterator<InternalRow> rows, final Map<Integer, Masks> masks, final int[] columns,
             final LongAccumulator records, final LongAccumulator tombstones) {
            this.rows = rows;
            this.masks = masks;
            this.partitionColumn = columns[0];
            this.keyColumn = columns[1];
            this.offsetColumn = columns[2];
            this.tombstoneColumn = columns[3];
            this.records = records;
            this.tombstones = tombstones;
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
                last = masks.get(partition);
                lastPartition = partition;
                if (last == null) {
                    throw new IllegalStateException("partition " + partition + " was not read for its winners in "
                            + "task " + TaskContext.getPartitionId());
                }
            }
            final long offset = row.getLong(offsetColumn);
            last.seen++;
            last.seenDigest += mix(offset);
            seen++;
            if (row.getBoolean(tombstoneColumn)) {
                seenTombstones++;
            }
            return row.isNullAt(keyColumn) || last.latest(offset);
        }

        private void finish() {
            done = true;
            for (final Map.Entry<Integer, Masks> entry : masks.entrySet()) {
                final Masks held = entry.getValue();
                if (held.seen != held.rows || held.seenDigest != held.digest) {
                    throw new IllegalStateException("partition " + entry.getKey() + ": the rows read are not "
                            + "those read for its winners (" + held.seen + " rows against " + held.rows + ")");
                }
            }
            records.add(seen);
            tombstones.add(seenTombstones);
        }
    }
}
