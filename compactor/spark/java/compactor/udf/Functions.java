package compactor.udf;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The compiled functions as Spark {@code UserDefinedFunction}s, for callers (Python through Py4J) that cannot
 * pick the typed {@code functions.udf(UDF2, DataType)} overload themselves. Each carries its name, so query
 * plans (and Spark's event log) show {@code kafka_partition(...)} and {@code task_offset(...)}.
 */
public final class Functions {
    private Functions() {
    }

    /** {@code kafka_partition(key binary, partitions int) -> int}: see {@link Murmur2Partition}. */
    public static UserDefinedFunction murmur2Partition() {
        return functions.udf(new Murmur2Partition(), DataTypes.IntegerType).withName("kafka_partition");
    }

    /**
     * {@code task_offset(spark_partition int, topic_partition int) -> bigint}, non-deterministic: see
     * {@link TaskOffset} ({@code cells}: its packed first offsets and rows; copy {@code share} of {@code shares}).
     */
    public static UserDefinedFunction taskOffset(final byte[] cells, final int partitions, final int share,
            final int shares) {
        return functions.udf(new TaskOffset(cells, partitions, share, shares), DataTypes.LongType)
                .asNondeterministic().withName("task_offset");
    }

    /** Register {@code kafka_partition(key, partitions)} for Spark SQL in {@code session}. */
    public static void register(final SparkSession session) {
        session.udf().register("kafka_partition", murmur2Partition());
    }
}
