package compactor.udf;

import java.util.function.Supplier;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.execution.SQLExecution;

import scala.Option;
import scala.runtime.AbstractFunction0;

/**
 * Run a job over a Dataset's rows as a SQL execution of its own, so that Spark's UI, its event log and its
 * listeners show it with its query plan ({@code Dataset.queryExecution().toRdd()} alone runs the jobs outside
 * any SQL execution).
 */
final class Executions {
    private Executions() {
    }

    static <T> T run(final Dataset<?> frame, final String name, final Supplier<T> body) {
        return SQLExecution.withNewExecutionId(frame.queryExecution(), Option.apply(name),
                new AbstractFunction0<T>() {
                    @Override
                    public T apply() {
                        return body.get();
                    }
                });
    }
}
