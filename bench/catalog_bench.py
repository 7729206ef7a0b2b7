"""One small commit's latency on an Iceberg REST catalog against the SQL catalog, in one run (issue 32).

    .venv/bin/python -m bench.catalog_bench --rounds 15            # ~2 min: starts its own REST catalog server

Both lakes are on this machine's disk: the SQL lake's catalog is its SQLite file, the REST lake's is Iceberg's
REST catalog server (``infra/rest-catalog-server.sh``, its own SQLite catalog behind HTTP, OAuth2 client
credentials) started in the work directory and stopped at the end. The operations alternate between the two
lakes, round after round, so that the machine's load moves both alike; each figure is the median over the
rounds, with the median of the per-round ratios REST / SQL:

  produce          one one-record ``produce_arrow`` (with a batch id) to a 4-partition topic: its planning
                   (a table load), its file and its conditional commit
  compact_publish  the cursor commit of a small incremental compaction (``publish_cursor``: loading the
                   compacted table, building the cursor snapshot, the conditional commit), and the whole run
  group_commit     one consumer group commit in each lake's group store: the SQL lake's default (the catalog's
                   SQLite database) and, for the REST lake, a directory store (``--group-store DIR``; a REST
                   catalog holds no groups itself, so a REST lake's groups need a store of their own)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from compactor.compaction.job import compact_topic
from compactor.config import LakeConfig
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000_000
VALUE = b"v" * 140


def start_rest(directory: Path) -> tuple[dict[str, str], int]:
    """Iceberg's REST catalog server for ``directory``: the lake's environment, and the server's process id."""
    secret = uuid.uuid4().hex
    env = {**os.environ, "REST_CATALOG_TOKEN": f"token-{secret}", "REST_CATALOG_CLIENT_ID": "bench",
           "REST_CATALOG_CLIENT_SECRET": secret}
    done = subprocess.run([str(ROOT / "infra" / "rest-catalog-server.sh"), str(directory)], env=env,
                          capture_output=True, text=True, check=True, timeout=180)
    uri = done.stdout.splitlines()[0].removeprefix("uri=")
    (directory / "warehouses" / "bench").mkdir(parents=True)
    lake_env = {"COMPACTOR_CATALOG_URI": uri, "COMPACTOR_REST_WAREHOUSE": "bench",
                "COMPACTOR_REST_CREDENTIAL": f"bench:{secret}"}
    return lake_env, int((directory / "rest.pid").read_text())


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    return {"rest_ms": round(statistics.median(r for r, _ in pairs), 1),
            "sql_ms": round(statistics.median(s for _, s in pairs), 1),
            "rest_over_sql": round(statistics.median(r / s for r, s in pairs), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compactions", type=int, default=5, help="compaction rounds (each lake: one run a round)")
    parser.add_argument("--workdir", default="bench/data/catalog")
    parser.add_argument("--out", default="bench/results/catalog.json")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rest_env, pid = start_rest(workdir / "rest")
    try:
        sql = Lake(warehouse=str(workdir / "warehouse"))
        rest = Lake(dataclasses.replace(LakeConfig.resolve(env=rest_env), catalog_name="rest",
                                        group_store=str(workdir / "groups")))
        lakes = {"rest": rest, "sql": sql}
        for lake in lakes.values():
            lake.create_topic("bench.p", partitions=4)
            lake.create_topic("bench.c", partitions=1, config={"cleanup.policy": "compact"})
        spark = sql.spark()
        from compactor.spark.catalog import register_catalog

        register_catalog(spark, rest.config)
        rest.attach_spark(spark)

        def produce(lake: Lake, i: int) -> float:
            data = pa.table({"key": [f"k{i}".encode()], "value": [VALUE]})
            return timed(lambda: produce_arrow(lake.topic("bench.p"), data, batch_id=f"b{i}", now_ms=T0 + i))

        for lake in lakes.values():  # warm-up: imports, first files, first commits
            produce(lake, -1)
        produced = [(produce(rest, i), produce(sql, i)) for i in range(args.rounds)]

        from compactor.compaction import publish as job  # publish_run calls publish_cursor by this module's name

        publishes: list[float] = []
        real_publish = getattr(job, "publish_cursor")  # noqa: B009 - the module's own name, patched below

        def publish_timed(*a: Any, **k: Any) -> int:
            started = time.perf_counter()
            try:
                return int(real_publish(*a, **k))
            finally:
                publishes.append((time.perf_counter() - started) * 1000)

        setattr(job, "publish_cursor", publish_timed)  # noqa: B010 - timed where publish_run calls it
        publish: list[tuple[float, float]] = []
        runs: list[tuple[float, float]] = []
        for i in range(args.compactions + 1):
            figures = {}
            for name, lake in lakes.items():
                keys = pa.table({"key": [f"k{j % 20}".encode() for j in range(50)], "value": [VALUE] * 50})
                produce_arrow(lake.topic("bench.c"), keys, now_ms=T0 + i)
                started = time.perf_counter()
                result = compact_topic(lake, "bench.c", now_ms=T0 + 1000 + i)
                assert result.committed
                figures[name] = ((time.perf_counter() - started) * 1000, publishes[-1])
            if i > 0:  # the first run of each is a full compaction with the JVM's first jobs
                runs.append((figures["rest"][0], figures["sql"][0]))
                publish.append((figures["rest"][1], figures["sql"][1]))

        from compactor.groups import GroupStore, TopicPartition

        stores = {name: GroupStore(lake) for name, lake in lakes.items()}
        for store in stores.values():  # warm-up: the group's first document or row
            store.commit("g", None, "", {TopicPartition("bench.p", 0): (0, -1)})

        def group_commit(name: str, i: int) -> float:
            return timed(lambda: stores[name].commit("g", None, "", {TopicPartition("bench.p", 0): (i, -1)}))

        group = [(group_commit("rest", i), group_commit("sql", i)) for i in range(1, args.rounds + 1)]
        result_json = {"rounds": args.rounds, "compactions": args.compactions,
                       "produce": summary(produced), "compact_publish": summary(publish),
                       "compact_run": summary(runs), "group_commit": summary(group)}
    finally:
        stop(pid)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result_json, indent=2))
    print(json.dumps(result_json, indent=2))


if __name__ == "__main__":
    main()
