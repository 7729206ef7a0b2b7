"""Attached logs against native topics (issue 31): the same records as a native topic and as a table in Kafka
Connect's Iceberg-sink layout (``_kafka_metadata_*`` columns, the key in a value column, unpartitioned, so files
mix partitions), each compacted in full, then again after a 1% append. One Spark session, one run; ratios
attached / native.

    PYTHONPATH=$PWD .venv/bin/python -m bench.attach_bench --records 5000000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench.workload import BASE_TIME_MS, Workload, append
from compactor.attach.api import attach_table, compact_attached
from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--workdir", default="bench/data/attach")
    parser.add_argument("--out", default="bench/results/attach.json")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    lake = Lake(warehouse=str(workdir / "warehouse"))
    lake.open(create=True)
    spark = get_or_create_session(lake.config, extra={"spark.master": f"local[{args.cores}]",
                                                      "spark.driver.memory": args.driver_memory,
                                                      "spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"})
    lake.attach_spark(spark)
    cat = lake.config.catalog_name
    w = Workload(records=args.records, partitions=args.partitions,
                 keys_per_partition=max(1, args.records // 10 // args.partitions))
    lake.catalog.create_namespace_if_not_exists("bench")
    topic = lake.create_topic("bench.native", partitions=w.partitions,
                              config={"cleanup.policy": "compact", "delete.retention.ms": "0"})
    append(topic, w, w.records, w.seed)
    select = ("SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS payload, partition AS "
              "_kafka_metadata_partition, offset AS _kafka_metadata_offset, unix_millis(timestamp) AS "
              f"_kafka_metadata_timestamp FROM {cat}.bench.native")
    spark.sql(f"CREATE TABLE {cat}.bench.sink USING iceberg AS {select}")
    attach_table(lake, "bench.attached", table="bench.sink", layout="kafka-connect", key_columns=["id"],
                 config={"delete.retention.ms": "0"})
    now = BASE_TIME_MS + 10**10
    figures: dict[str, Any] = {"records": w.records, "partitions": w.partitions}

    def timed(label: str, fn: Any) -> Any:
        started = time.perf_counter()
        result = fn()
        figures[label] = round(time.perf_counter() - started, 2)
        print(f"[bench] {label}: {figures[label]} s", flush=True)
        return result

    timed("native_full", lambda: TwoPhaseCompactor(lake, "bench.native", now_ms=now).run())
    timed("attached_full", lambda: compact_attached(lake, "bench.attached", now_ms=now))
    ends = topic.refresh().offsets().next_offsets
    append(topic, w, w.records // 100, w.seed + 1)
    since = " OR ".join(f"(partition = {p} AND offset >= {o})" for p, o in enumerate(ends))
    spark.sql(f"INSERT INTO {cat}.bench.sink {select} WHERE {since}")
    timed("native_incremental", lambda: TwoPhaseCompactor(lake, "bench.native", now_ms=now + 1).run())
    attached = timed("attached_incremental", lambda: compact_attached(lake, "bench.attached", now_ms=now + 1))
    figures["attached_incremental_records_read"] = attached.stats["records_read"]
    figures["full_ratio"] = round(figures["attached_full"] / figures["native_full"], 2)
    figures["incremental_ratio"] = round(figures["attached_incremental"] / figures["native_incremental"], 2)
    print(json.dumps(figures, indent=2))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
