package compactor.udf;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.io.FileIO;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.LongAccumulator;

import scala.collection.Iterator;
import scala.collection.JavaConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Each key's latest record among a range's rows, found by key tables ({@link KeyTable}) in one job and applied to the
 * range's full rows, read in any grouping, in another: for a range whose partitions are fewer than the task slots
 * (one large partition), where {@link RangeWinners#keep} would read a partition's range in one task.
 *
 * <p>{@link #find} reads the range's narrow columns grouped by partition, {@code buckets} times: task {@code b} of a
 * partition holds the keys whose hash falls in bucket {@code b}, so a partition's keys are shared among its tasks
 * while each task reads all its rows. Each task writes its partition's winners, a bit per offset (a map of words
 * where a mirrored topic's offsets are sparse), to a file of its own through the table's file IO, and tells the
 * driver only the file, the partition's row count and the sum of its offsets' mixes: nothing per key or per record
 * passes through the driver. The driver checks that each partition was read whole by each bucket's task (the same
 * counts and mixes). {@link #keep} then passes on the full rows the view can keep, in whatever slices the range is
 * read: each task reads the bits of the partitions it meets from their buckets' files, and reports the rows it read
 * per partition; the result's counts are given only once those, summed, match the rows the winners were found in.
 * The files are the caller's to delete ({@link #files}); a run that dies leaves them to orphan-file removal.
 */
public final class SharedWinners {
    private final Broadcast<Table> table;
    private final HashMap<Integer, String[]> files;      // partition -> its buckets' files
    private final HashMap<Integer, long[]> expected;     // partition -> rows, offsets' mix
    private final long keys;
    private final long words;

    private SharedWinners(final Broadcast<Table> table, final HashMap<Integer, String[]> files,
                          final HashMap<Integer, long[]> expected, final long keys, final long words) {
        this.table = table;
        this.files = files;
        this.expected = expected;
        this.keys = keys;
        this.words = words;
    }

    /**
     * The winners of {@code narrow}'s rows (columns {@code partition, key, offset}, each task holding whole
     * partitions), found in {@code buckets} tasks per task of {@code narrow} and written below {@code directory}
     * through {@code table}'s file IO. {@code hashBits} keeps that many low bits of each key's hash (64 but in tests).
     */
    public static SharedWinners find(final Dataset<Row> narrow, final Table table, final String directory,
                                     final int buckets, final int hashBits) {
        KeyTable.check(hashBits, 0, buckets, narrow.schema());
        final JavaSparkContext context = JavaSparkContext.fromSparkContext(narrow.sparkSession().sparkContext());
        final Broadcast<Table> shared = context.broadcast(SerializableTable.copyOf(table));
        final String base = directory.endsWith("/") ? directory : directory + "/";
        final RDD<InternalRow> rows = narrow.queryExecution().toRdd();
        final ClassTag<Found> tag = ClassTag$.MODULE$.apply(Found.class);
        RDD<Found> found = rows.mapPartitions(new Find(shared, base, hashBits, 0, buckets), false, tag);
        for (int bucket = 1; bucket < buckets; bucket++) {
            found = found.union(rows.mapPartitions(new Find(shared, base, hashBits, bucket, buckets), false, tag));
        }
        final HashMap<Integer, String[]> files = new HashMap<>();
        final HashMap<Integer, long[]> expected = new HashMap<>();
        long keys = 0;
        long words = 0;
        for (final Found one : found.toJavaRDD().collect()) {
            final String[] paths = files.computeIfAbsent(one.partition, p -> new String[buckets]);
            if (paths[one.bucket] != null) {
                throw new IllegalStateException("partition " + one.partition + " was read by more than one task for "
                        + "its winners: its keys' latest offsets cannot be found apart");
            }
            paths[one.bucket] = one.path;
            final long[] counted = expected.putIfAbsent(one.partition, new long[] {one.rows, one.digest});
            if (counted != null && (counted[0] != one.rows || counted[1] != one.digest)) {
                throw new IllegalStateException("the winners of partition " + one.partition
                        + " were found over different rows");
            }
            keys += one.keys;
            words += one.words;
        }
        return new SharedWinners(shared, files, expected, keys, words);
    }

    /** The keys that won (one compacted row each). */
    public long keys() {
        return keys;
    }

    /** The 64-bit words of bits holding a winner, over all buckets' files. */
    public long words() {
        return words;
    }

    /** The files of bits {@link #find} wrote (the caller deletes them once the run is over). */
    public List<String> files() {
        final List<String> out = new ArrayList<>();
        for (final String[] paths : files.values()) {
            out.addAll(Arrays.asList(paths));
        }
        Collections.sort(out);
        return out;
    }

    /**
     * The rows of {@code full} that the compacted view can keep (as {@link RangeWinners#keep} keeps them: each keyed
     * row that is its key's latest, and every keyless one), read in any grouping. {@code full} must have
     * {@code partition}, {@code key} and {@code offset} columns and the boolean column {@code tombstone}.
     */
    public RangeWinners.Result keep(final Dataset<Row> full, final String tombstone) {
        final StructType schema = full.schema();
        final SparkSession session = full.sparkSession();
        final LongAccumulator records = session.sparkContext().longAccumulator("compactor: range records");
        final LongAccumulator tombstones = session.sparkContext().longAccumulator("compactor: range tombstones");
        final CollectionAccumulator<long[]> reported =
                session.sparkContext().collectionAccumulator("compactor: rows read per partition");
        final ClassTag<InternalRow> tag = ClassTag$.MODULE$.apply(InternalRow.class);
        final RDD<InternalRow> kept = full.queryExecution().toRdd().mapPartitions(
                new Pass(table, files, RangeWinners.columns(schema, tombstone), records, tombstones, reported), false,
                tag);
        return new RangeWinners.Result(RangeWinners.frame(session, kept, schema), records, tombstones, reported,
                expected);
    }

    /** What one task of {@link #find} found for one partition. */
    static final class Found implements Serializable {
        private static final long serialVersionUID = 1L;
        final int partition;
        final int bucket;
        final long keys;
        final long words;
        final long rows;
        final long digest;
        final String path;

        Found(final int partition, final int bucket, final long keys, final OffsetMasks masks, final String path) {
            this.partition = partition;
            this.bucket = bucket;
            this.keys = keys;
            this.words = masks.words();
            this.rows = masks.rows;
            this.digest = masks.digest;
            this.path = path;
        }
    }

    /** A task of {@link #find} (a named class: Spark's closure cleaner parses the bytecode of a lambda's class). */
    private static final class Find extends AbstractFunction1<Iterator<InternalRow>, Iterator<Found>>
            implements Serializable {
        private static final long serialVersionUID = 1L;
        private final Broadcast<Table> table;
        private final String directory;
        private final int hashBits;
        private final int bucket;
        private final int buckets;

        Find(final Broadcast<Table> table, final String directory, final int hashBits, final int bucket,
             final int buckets) {
            this.table = table;
            this.directory = directory;
            this.hashBits = hashBits;
            this.bucket = bucket;
            this.buckets = buckets;
        }

        @Override
        public Iterator<Found> apply(final Iterator<InternalRow> rows) {
            final KeyTable keyTable = new KeyTable(hashBits, bucket, buckets);
            while (rows.hasNext()) {
                keyTable.add(rows.next());
            }
            final Map<Integer, Long> keys = keyTable.keysPerPartition();
            final FileIO io = table.value().io();
            final List<Found> out = new ArrayList<>();
            final TaskContext task = TaskContext.get();
            final String attempt = task == null ? "0" : task.stageId() + "-" + task.partitionId() + "-"
                    + task.attemptNumber();
            for (final Map.Entry<Integer, OffsetMasks> entry : keyTable.masks().entrySet()) {
                final String path = directory + "winners-p" + entry.getKey() + "-b" + bucket + "-" + attempt + ".bits";
                try (DataOutputStream stream = new DataOutputStream(new BufferedOutputStream(
                        io.newOutputFile(path).createOrOverwrite(), 1 << 16))) {
                    entry.getValue().write(stream);
                } catch (final IOException e) {
                    throw new UncheckedIOException("writing the winners of partition " + entry.getKey() + " to "
                            + path, e);
                }
                out.add(new Found(entry.getKey(), bucket, keys.getOrDefault(entry.getKey(), 0L), entry.getValue(),
                        path));
            }
            return JavaConverters.asScalaIteratorConverter(out.iterator()).asScala();
        }
    }

    /** A task of {@link #keep}: the bits of each partition it meets, read once from its buckets' files. */
    private static final class Pass extends AbstractFunction1<Iterator<InternalRow>, Iterator<InternalRow>>
            implements Serializable {
        private static final long serialVersionUID = 1L;
        private final Broadcast<Table> table;
        private final HashMap<Integer, String[]> files;
        private final int[] columns;
        private final LongAccumulator records;
        private final LongAccumulator tombstones;
        private final CollectionAccumulator<long[]> reported;

        Pass(final Broadcast<Table> table, final HashMap<Integer, String[]> files, final int[] columns,
             final LongAccumulator records, final LongAccumulator tombstones,
             final CollectionAccumulator<long[]> reported) {
            this.table = table;
            this.files = files;
            this.columns = columns.clone();
            this.records = records;
            this.tombstones = tombstones;
            this.reported = reported;
        }

        @Override
        public Iterator<InternalRow> apply(final Iterator<InternalRow> rows) {
            final FileIO io = table.value().io();
            final Map<Integer, OffsetMasks> read = new HashMap<>();
            return new KeptRows(rows, partition -> read.computeIfAbsent(partition, p -> load(io, p)), columns,
                    records, tombstones, reported);
        }

        private OffsetMasks load(final FileIO io, final int partition) {
            final String[] paths = files.get(partition);
            if (paths == null) {
                return null;
            }
            OffsetMasks joined = null;
            for (final String path : paths) {
                try (DataInputStream stream = new DataInputStream(new BufferedInputStream(
                        io.newInputFile(path).newStream(), 1 << 16))) {
                    final OffsetMasks one = OffsetMasks.read(stream);
                    if (joined == null) {
                        joined = one;
                    } else {
                        joined.add(one);
                    }
                } catch (final IOException e) {
                    throw new UncheckedIOException("reading the winners of partition " + partition + " from " + path,
                            e);
                }
            }
            return joined;
        }
    }
}
