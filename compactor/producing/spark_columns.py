"""The public path of ``register_functions`` (docs/reference.md#the-python-api): after
``compactor.producing.spark_columns.register_functions(spark)``, Spark SQL has ``kafka_partition(key, n)``,
Kafka's partitioner. The compiled Spark functions themselves are in ``compactor.spark.udf``."""

from compactor.spark.udf import register_functions

__all__ = ["register_functions"]
