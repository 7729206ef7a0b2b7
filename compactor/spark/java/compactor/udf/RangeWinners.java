package compactor.udf;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.LongAccumulator;

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
 * way to give a DataFrame an RDD of its internal rows: {@link #frame} is the project's one use of it, for this class
 * and {@link SharedWinners}).
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
        KeyTable.check(hashBits, 0, 1, narrow.schema());
        final StructType schema = full.schema();
        final int[] columns = columns(schema, tombstone);
        final SparkSession session = full.sparkSession();
        final LongAccumulator records = session.sparkContext().longAccumulator("compactor: range records");
        final LongAccumulator tombstones = session.sparkContext().longAccumulator("compactor: range tombstones");
        final RDD<InternalRow> keys = narrow.queryExecution().toRdd();
        final RDD<InternalRow> rows = full.queryExecution().toRdd();
        final ClassTag<InternalRow> tag = ClassTag$.MODULE$.apply(InternalRow.class);
        final RDD<InternalRow> zipped = keys.zipPartitions(rows, false,
                new Zip(columns, hashBits, records, tombstones), tag, tag);
        return new Result(frame(session, zipped, schema), records, tombstones, null, null);
    }

    /** A DataFrame of {@code rows}, internal rows of {@code schema}: the project's one use of Spark's private API. */
    static Dataset<Row> frame(final SparkSession session, final RDD<InternalRow> rows, final StructType schema) {
        return session.internalCreateDataFrame(rows, schema, false);
    }

    /** The indexes of {@code partition, key, offset} and the tombstone flag in {@code schema}. */
    static int[] columns(final StructType schema, final String tombstone) {
        return new int[] {schema.fieldIndex("partition"), schema.fieldIndex("key"), schema.fieldIndex("offset"),
                          schema.fieldIndex(tombstone)};
    }

    /**
     * Fail unless {@code rows} rows whose offsets' mixes sum to {@code mix} are the partition's rows its winners were
     * found in ({@code expectedRows}, {@code expectedMix}).
     */
    static void check(final int partition, final long expectedRows, final long expectedMix, final long rows,
                      final long mix) {
        if (rows != expectedRows || mix != expectedMix) {
            throw new IllegalStateException("partition " + partition + ": the rows read are not those read for its "
                    + "winners (" + rows + " rows against " + expectedRows + ")");
        }
    }

    /**
     * What {@link #keep} and {@link SharedWinners#keep} return: the rows, and the counts of the range's rows that the
     * job reading them fills. Where several tasks read a partition's rows ({@link SharedWinners}), the counts are
     * given only once the tasks' figures, summed, match the rows the winners were found in.
     */
    public static final class Result {
        private final Dataset<Row> rows;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;
        private final CollectionAccumulator<long[]> reported;
        private final Map<Integer, long[]> expected;  // partition -> rows, offsets' mix

        Result(final Dataset<Row> rows, final LongAccumulator records, final LongAccumulator tombstones,
               final CollectionAccumulator<long[]> reported, final Map<Integer, long[]> expected) {
            this.rows = rows;
            this.records = records;
            this.tombstones = tombstones;
            this.reported = reported;
            this.expected = expected;
        }

        private void checked() {
            if (reported == null) {
                return;
            }
            final Map<Integer, long[]> sums = new HashMap<>();
            for (final long[] figures : reported.value()) {
                final long[] sum = sums.computeIfAbsent((int) figures[0], p -> new long[2]);
                sum[0] += figures[1];
                sum[1] += figures[2];
            }
            for (final Map.Entry<Integer, long[]> entry : expected.entrySet()) {
                final long[] sum = sums.getOrDefault(entry.getKey(), new long[2]);
                check(entry.getKey(), entry.getValue()[0], entry.getValue()[1], sum[0], sum[1]);
            }
        }

        /** The rows the view can keep, in {@code full}'s columns. */
        public Dataset<Row> rows() {
            return rows;
        }

        /** The range's rows read, once a job has read {@link #rows}. */
        public long records() {
            checked();
            return records.value();
        }

        /** The range's rows flagged as tombstones, once a job has read {@link #rows}. */
        public long tombstones() {
            checked();
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

    /** The task's function, a named class (Spark's closure cleaner parses the bytecode of a lambda's class). */
    private static final class Zip extends AbstractFunction2<Iterator<InternalRow>, Iterator<InternalRow>,
            Iterator<InternalRow>> implements Serializable {
        private static final long serialVersionUID = 1L;
        private final int[] columns;
        private final int hashBits;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;

        Zip(final int[] columns, final int hashBits, final LongAccumulator records,
            final LongAccumulator tombstones) {
            this.columns = columns.clone();
            this.hashBits = hashBits;
            this.records = records;
            this.tombstones = tombstones;
        }

        @Override
        public Iterator<InternalRow> apply(final Iterator<InternalRow> narrow, final Iterator<InternalRow> full) {
            final KeyTable table = new KeyTable(hashBits);
            while (narrow.hasNext()) {
                table.add(narrow.next());
            }
            return new KeptRows(full, table.masks(), columns, records, tombstones);
        }
    }
}
