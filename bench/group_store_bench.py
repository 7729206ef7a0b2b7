"""Group commit latency for each group store (issue 29): one member's commit (2 partitions) at commit 100 and
at commit ``--commits`` of a group's life, on the lake's SQLite catalog database (the default), PostgreSQL,
S3 (moto's server: a local HTTP round trip, not a real bucket's) and a local directory.

Each store runs its figures in its own process-local set-up; for one store, a group commits ``commits - 100``
times, then its last 100 commits alternate with the first 100 of a fresh group, so both figures come from the
same minutes of a shared machine (medians of the last 50 of each).

    .venv/bin/python -m bench.group_store_bench --commits 10000 --stores sqlite,postgres,s3,directory
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from compactor import Consumer
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def old_against_new(make: Callable[[str], Callable[[int], object]], total: int) -> dict[str, Any]:
    """Commit ``total`` times to an old group; over its last 100, alternate with the first 100 commits of a new
    one. Medians of the last 50 of each, in milliseconds."""
    old = make("old")
    for i in range(total - 100):
        old(i)
    new = make("new")
    old_times, new_times = [], []
    for i in range(100):
        old_times.append(_timed(partial(old, total - 100 + i)))
        new_times.append(_timed(partial(new, i)))
    at_new, at_old = statistics.median(new_times[50:]), statistics.median(old_times[50:])
    return {"commits": total, "at_100_ms": round(at_new * 1000, 2), f"at_{total}_ms": round(at_old * 1000, 2),
            "ratio": round(at_old / at_new, 3)}


@contextlib.contextmanager
def store_uri(kind: str, work: Path) -> Iterator[tuple[str | None, dict[str, str]]]:
    """The ``--group-store`` of ``kind`` (None: the default, the catalog's SQLite database) and the
    environment it needs, with its server running while the block runs."""
    if kind == "sqlite":
        yield None, {}
    elif kind == "directory":
        yield str(work / "groups"), {}
    elif kind == "s3":
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "bench",
               "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
        import boto3

        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="bench",
                     aws_secret_access_key="bench", region_name="us-east-1").create_bucket(Bucket="groups")
        try:
            yield "s3://groups/bench", env
        finally:
            server.stop()
    elif kind == "postgres":
        from tests.pg_server import running_postgres

        with running_postgres(fsync=True) as postgres:
            yield postgres.create_database("groups"), {}
    else:
        raise SystemExit(f"unknown store {kind!r}")


def store_commits(kind: str, commits: int, root: Path) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=root))  # on the disk the warehouse would be on
    members: list[Consumer] = []
    try:
        with store_uri(kind, work) as (uri, env):
            from compactor.config import LakeConfig

            lake = Lake(LakeConfig.resolve(str(work / "warehouse"), env=env, group_store=uri))
            lake.open(create=True)
            lake.create_topic("bench.commits", partitions=2)
            produce(lake.topic("bench.commits"), [ProducerRecord(b"a", b"1", partition=p) for p in (0, 1)])

            def member(group: str) -> Callable[[int], object]:
                consumer = Consumer(lake, "bench.commits", group=f"commits-{group}",
                                    max_poll_interval_ms=86_400_000)  # it only commits: no polls
                members.append(consumer)
                return lambda i: consumer.commit({0: i % 2, 1: (i + 1) % 2})

            try:
                return {"store": kind, **old_against_new(member, commits)}
            finally:
                for consumer in members:
                    consumer.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="group commit latency per group store")
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--stores", default="sqlite,postgres,s3,directory")
    parser.add_argument("--workdir", default="bench/data/group-stores")
    args = parser.parse_args()
    results = [store_commits(kind, args.commits, Path(args.workdir)) for kind in args.stores.split(",")]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
