package compactor.udf;

import java.nio.ByteBuffer;
import java.util.Arrays;

import org.apache.spark.sql.api.java.UDF2;

/**
 * A row's offset in the DataFrame producer's batch: the first offset of its (Spark partition, topic partition)
 * cell, from the counting pass, plus its position among the cell's rows in its task, counted as the rows stream
 * by (0, 1, 2, ... per topic partition, in the order the task produces its rows). No sort, no shuffle, and no
 * lookup per row beyond an array index.
 *
 * <p>The cells come as one byte array of big-endian longs, {@code (cell, first offset, rows)} triples sorted by
 * cell, where {@code cell = spark partition * partitions + topic partition}; a task expands its own Spark
 * partition's cells into arrays once. A row in a cell the counting pass did not see gets a negative offset, which
 * the producer's check of the written files refuses. It must be registered as non-deterministic, so that Spark
 * evaluates it exactly once per row, where it stands in the plan. The counters live in this object, and every
 * task attempt (retried or speculative included) deserializes its own copy of the plan and so of this function:
 * each attempt counts from 0, with no per-row lookup of the task (a thread-local {@code TaskContext.get()} per row
 * cost 8% of the write).
 *
 * <p><b>Shares.</b> When the input has fewer busy tasks than the cluster has cores, the producer writes the
 * input as {@code shares} copies side by side, each reading all of it: copy {@code share} keeps, of each cell's
 * {@code n} rows, the positions {@code [n * share / shares, n * (share + 1) / shares)} (the last copy keeps every
 * position from its start on, so a cell with more rows than counted still reaches the files' check) and gets
 * {@link #SKIP} for the others, which the producer filters out. Each copy thus writes one contiguous offset range
 * per cell.
 */
public final class TaskOffset implements UDF2<Integer, Integer, Long> {
    private static final long serialVersionUID = 2L;
    private static final long UNSEEN = Long.MIN_VALUE / 2;
    /** A row another copy writes (only with more than one share). */
    public static final long SKIP = Long.MIN_VALUE;

    private final long[] cells;
    private final long[] firsts;
    private final long[] sizes;
    private final int partitions;
    private final int share;
    private final int shares;

    private transient int sparkPartition = -1;
    private transient long[] first;
    private transient long[] next;
    private transient long[] low;
    private transient long[] high;

    public TaskOffset(final byte[] packed, final int partitions, final int share, final int shares) {
        if (shares < 1 || share < 0 || share >= shares) {
            throw new IllegalArgumentException("share " + share + " of " + shares);
        }
        final ByteBuffer buffer = ByteBuffer.wrap(packed);
        final int count = packed.length / 24;
        this.cells = new long[count];
        this.firsts = new long[count];
        this.sizes = new long[count];
        for (int i = 0; i < count; i++) {
            cells[i] = buffer.getLong();
            firsts[i] = buffer.getLong();
            sizes[i] = buffer.getLong();
        }
        this.partitions = partitions;
        this.share = share;
        this.shares = shares;
    }

    @Override
    public Long call(final Integer pid, final Integer topicPartition) {
        if (pid == null || topicPartition == null) {
            return null;
        }
        if (first == null || pid != sparkPartition) {
            expand(pid);
        }
        final int p = topicPartition;
        if (p < 0 || p >= partitions) {
            return UNSEEN;
        }
        final long position = next[p]++;
        if (shares > 1 && first[p] != UNSEEN && (position < low[p] || position >= high[p])) {
            return SKIP;
        }
        return first[p] + position;
    }

    /** This Spark partition's first offsets, one per topic partition ({@link #UNSEEN} where it has no rows),
     * and this copy's positions of each. */
    private void expand(final int pid) {
        first = new long[partitions];
        next = new long[partitions];
        low = new long[partitions];
        high = new long[partitions];
        Arrays.fill(first, UNSEEN);
        Arrays.fill(high, Long.MAX_VALUE);
        final long base = (long) pid * partitions;
        int i = Arrays.binarySearch(cells, base);
        if (i < 0) {
            i = -i - 1;
        }
        for (; i < cells.length && cells[i] < base + partitions; i++) {
            final int p = (int) (cells[i] - base);
            first[p] = firsts[i];
            low[p] = sizes[i] * share / shares;
            if (share < shares - 1) {
                high[p] = sizes[i] * (share + 1) / shares;
            }
        }
        sparkPartition = pid;
    }
}
