"""Where the DataFrame producer's time goes (bench/README.md, "Producing"): its pieces timed side by side with
Spark's plain append of the same rows, interleaved, a JVM garbage collection before each.

    .venv/bin/python -m bench.dataframe_pieces                    # 1M rows, 3 repetitions (~3 min)

Pieces go to Spark's ``noop`` sink (everything computed, nothing written) unless they are the real thing:
  scan           the input's key and value
  prepare        the producer's typed columns, positions, topic partitions (Kafka's murmur2) and record sizes
  prepare+sort   the same, sorted within each Spark partition by (topic partition, position): the write order
  murmur2        the scan plus the murmur2 partition column only
  count pass     the producer's counting pass (an aggregation collected on the driver)
  plain append   ``writeTo(...).append()`` of the input to a plain (key, value) Iceberg table
  product        ``produce_dataframe`` into a fresh 4-partition topic
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from compactor.lake import Lake
from compactor.topics.dataframe import _count, _prepare, produce_dataframe
from compactor.topics.spark_columns import murmur2_partition

NOW_MS = 1_700_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dataframe-pieces-"))
    keys = pa.array([f"user-{i % args.keys}".encode() for i in range(args.records)], pa.binary())
    values = pa.array([b"v" * 140] * args.records, pa.binary())
    pq.write_table(pa.table({"key": keys, "value": values}), work / "input.parquet")
    lake = Lake(warehouse=str(work / "warehouse"))
    spark = lake.spark()
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    lake.catalog.create_namespace_if_not_exists("bench")
    df = spark.read.parquet(str(work / "input.parquet"))
    catalog = lake.config.catalog_name
    made = [0]

    def noop(frame: DataFrame) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def plain() -> Callable[[], None]:
        made[0] += 1
        table = f"`{catalog}`.bench.plain{made[0]}"
        spark.sql(f"CREATE TABLE {table} (key BINARY, value BINARY) USING iceberg")
        return lambda: df.writeTo(table).append()

    def product() -> Callable[[], None]:
        made[0] += 1
        name = f"bench.topic{made[0]}"
        lake.create_topic(name, partitions=4)

        def run() -> None:
            produce_dataframe(lake, name, df, now_ms=NOW_MS)
        return run

    def count_pass() -> None:
        _count(_prepare(df, 4, 0), 4, 1 << 20, headers=False)

    pieces: dict[str, Callable[[], Callable[[], None]]] = {
        "scan": lambda: noop(df.select("key", "value")),
        "prepare": lambda: noop(_prepare(df, 4, 0)),
        "prepare+sort": lambda: noop(_prepare(df, 4, 0).sortWithinPartitions("_p", "_row")),
        "murmur2": lambda: noop(df.withColumn("_p", murmur2_partition(F.col("key"), 4))),
        "count pass": lambda: count_pass,
        "plain append": plain,
        "product": product,
    }
    seconds: dict[str, list[float]] = {name: [] for name in pieces}
    for rep in range(args.repeats + 1):  # the first round warms the JVM up and is not counted
        for name, make in pieces.items():
            run = make()
            spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
            time.sleep(0.2)
            started = time.perf_counter()
            run()
            if rep:
                seconds[name].append(round(time.perf_counter() - started, 3))
    plain_median = statistics.median(seconds["plain append"])
    result: dict[str, object] = {name: {"median": statistics.median(runs), "runs": runs,
                     "vs_plain_append": round(statistics.median(runs) / plain_median, 2)}
              for name, runs in seconds.items()}
    result["input_spark_partitions"] = df.rdd.getNumPartitions()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
