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
 * <p>The cells come as one byte array of big-endian longs, {@code (cell, first offset)} pairs sorted by cell, where
 * {@code cell = spark partition * partitions + topic partition}; a task expands its own Spark partition's cells
 * into an array once. A row in a cell the counting pass did not see gets a negative offset, which the producer's
 * check of the written files refuses. It must be registered as non-deterministic, so that Spark evaluates it
 * exactly once per row, where it stands in the plan. The counters live in this object, and every task attempt
 * (retried or speculative included) deserializes its own copy of the plan and so of this function: each attempt
 * counts from 0, with no per-row lookup of the task (a thread-local {@code TaskContext.get()} per row cost 8% of
 * the write).
 */
public final class TaskOffset implements UDF2<Integer, Integer, Long> {
    private static final long serialVersionUID = 1L;
    private static final long UNSEEN = Long.MIN_VALUE / 2;

    private final long[] cells;
    private final long[] firsts;
    private final int partitions;

    private transient int sparkPartition = -1;
    private transient long[] first;
    private transient long[] next;

    public TaskOffset(final byte[] packed, final int partitions) {
        final ByteBuffer buffer = ByteBuffer.wrap(packed);
        final int count = packed.length / 16;
        this.cells = new long[count];
        this.firsts = new long[count];
        for (int i = 0; i < count; i++) {
            cells[i] = buffer.getLong();
            firsts[i] = buffer.getLong();
        }
        this.partitions = partitions;
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
        return first[p] + next[p]++;
    }

    /** This Spark partition's first offsets, one per topic partition ({@link #UNSEEN} where it has no rows). */
    private void expand(final int pid) {
        first = new long[partitions];
        next = new long[partitions];
        Arrays.fill(first, UNSEEN);
        final long low = (long) pid * partitions;
        int i = Arrays.binarySearch(cells, low);
        if (i < 0) {
            i = -i - 1;
        }
        for (; i < cells.length && cells[i] < low + partitions; i++) {
            first[(int) (cells[i] - low)] = firsts[i];
        }
        sparkPartition = pid;
    }
}
