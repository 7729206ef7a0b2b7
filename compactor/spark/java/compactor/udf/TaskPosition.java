package compactor.udf;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The position of a row among the rows of the same topic partition in its Spark task: 0, 1, 2, ... per topic
 * partition, in the order the task produces its rows.
 *
 * <p>With the (Spark partition, topic partition) counts known first, {@code base + position} is a row's dense
 * offset in the DataFrame's order without sorting the task's rows (the DataFrame producer). It must be
 * registered as non-deterministic, so that Spark evaluates it exactly once per row, where it stands in the plan.
 * The counters are per task attempt: a retried or speculative attempt starts again from 0.
 */
public final class TaskPosition implements UDF1<Integer, Long> {
    private static final long serialVersionUID = 1L;

    private transient long[] next;
    private transient long attempt = -1;

    @Override
    public Long call(final Integer topicPartition) {
        if (topicPartition == null) {
            return null;
        }
        final TaskContext task = TaskContext.get();
        final long current = task == null ? -2 : task.taskAttemptId();
        final int p = topicPartition;
        if (next == null || current != attempt) {
            next = new long[Math.max(16, p + 1)];
            attempt = current;
        } else if (p >= next.length) {
            next = java.util.Arrays.copyOf(next, Math.max(p + 1, next.length * 2));
        }
        return next[p]++;
    }
}
