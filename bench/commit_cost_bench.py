"""Commit cost with the raw snapshot window full (BENCHMARK.md, "commit cost with the raw snapshot window full").

    .venv/bin/python -m bench.commit_cost_bench --repeats 3                 # default window, 4,000 commits (~10 min)
    .venv/bin/python -m bench.commit_cost_bench --window-count 2000 --repeats 1

The same commit as ``bench.produce_bench``'s commit-cost figure: one one-record commit with a batch id to a
4-partition topic, one simulated second apart (so the default window is full by count from commit 1,001 on).
Per run it reports:

  wall, cpu            milliseconds of one commit at commit 1, 100, 1,000, 2,000 and 4,000 of the aged topic's
                       life (median of the 11 commits around each point), wall-clock and this process's CPU time;
                       sequential, so a shared machine's changing load moves them (the side-by-side ratios do not)
  side_by_side         then 25 rounds of one commit each to a new topic (its commits 2 to 6; a new topic every
                       5), to the aged topic (commit 4,000 on) and to a half-aged topic committed alongside it
                       (commit 2,000 on): medians and the medians of the per-round ratios. Targets:
                       aged_over_half_aged (commit 4,000 over commit 2,000) at most 1.2, aged_over_new at most 3
  metadata             snapshots in the aged topic's metadata, its JSON size and the manifests of its snapshot
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from compactor.lake import Lake
from compactor.producing.producer import produce_arrow
from compactor.topics.topic import Topic

VALUE_BYTES = 140
T0 = 1_800_000_000_000
POINTS = (1, 100, 1000, 2000, 4000)


class CommitCost:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        workdir = Path(args.workdir).resolve()
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        self.lake = Lake(warehouse=str(workdir / "warehouse"))
        self.lake.open(create=True)  # a new lake
        self.lake.catalog.create_namespace_if_not_exists("bench")
        self.counter = 0

    def new_topic(self, config: dict[str, str] | None = None) -> Topic:
        self.counter += 1
        return self.lake.create_topic(f"bench.t{self.counter}", partitions=self.args.partitions, config=config)

    @staticmethod
    def one_commit(topic: Topic, i: int) -> tuple[float, float]:
        """Wall and CPU seconds of one one-record commit (with a batch id) at simulated second ``i``."""
        data = pa.table({"key": [f"k{i}".encode()], "value": [b"v" * VALUE_BYTES]})
        wall, cpu = time.perf_counter(), time.process_time()
        produce_arrow(topic, data, batch_id=f"commit-{i}", now_ms=T0 + i * 1000)
        return time.perf_counter() - wall, time.process_time() - cpu

    def run_once(self) -> dict[str, Any]:
        a = self.args
        config = {"raw.snapshot.window.count": str(a.window_count)} if a.window_count is not None else None
        aged, half = self.new_topic(config), self.new_topic(config)
        self.one_commit(self.new_topic(), 0)  # warm-up: imports and the first writes of the process
        wall, cpu = [], []
        for i in range(a.commits):
            w, c = self.one_commit(aged, i)
            wall.append(w)
            cpu.append(c)
            if i < a.commits // 2:
                self.one_commit(half, i)
            if (i + 1) % 500 == 0:
                print(f"[bench] {i + 1} commits", flush=True)

        def at(times: list[float], point: int) -> float:
            return round(statistics.median(times[max(0, point - 6): point + 5]) * 1000, 1)

        points = [p for p in POINTS if p <= a.commits]
        out: dict[str, Any] = {"wall": {str(p): at(wall, p) for p in points},
                               "cpu": {str(p): at(cpu, p) for p in points}}
        # side by side: a commit to each of a new topic, the aged one and the half-aged one, 25 times in turn
        rounds: dict[str, list[tuple[float, float, float]]] = {"wall": [], "cpu": []}
        fresh = self.new_topic()
        for j in range(25):
            if j % 5 == 0:
                fresh = self.new_topic()
                self.one_commit(fresh, 0)  # a topic's first commit writes its first manifest: not a steady one
            new = self.one_commit(fresh, j % 5 + 1)
            old = self.one_commit(aged, a.commits + j)
            mid = self.one_commit(half, a.commits // 2 + j)
            for k, index in (("wall", 0), ("cpu", 1)):
                rounds[k].append((old[index], mid[index], new[index]))
        out["side_by_side"] = {k: {
            "aged_ms": round(statistics.median(o for o, _, _ in v) * 1000, 1),
            "half_aged_ms": round(statistics.median(m for _, m, _ in v) * 1000, 1),
            "new_topic_ms": round(statistics.median(n for _, _, n in v) * 1000, 1),
            "aged_over_new": round(statistics.median(o / n for o, _, n in v), 2),
            "aged_over_half_aged": round(statistics.median(o / m for o, m, _ in v), 2)}
            for k, v in rounds.items()}
        table = aged.refresh().table
        current = table.current_snapshot()
        out["metadata"] = {"snapshots": len(table.metadata.snapshots),
                           "json_bytes": len(table.metadata.model_dump_json()),
                           "manifests": len(current.manifests(table.io)) if current is not None else 0}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description="commit cost with the raw snapshot window full (bench/README.md)")
    parser.add_argument("--commits", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--window-count", type=int, default=None,
                        help="raw.snapshot.window.count of the aged topic (default: the topic default)")
    parser.add_argument("--workdir", default="bench/data/commit_cost")
    parser.add_argument("--out", default="bench/results/commit_cost.json")
    args = parser.parse_args()
    bench = CommitCost(args)
    runs = []
    for rep in range(args.repeats):
        runs.append(bench.run_once())
        print(f"[bench] run {rep + 1}: {json.dumps(runs[-1])}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(runs, indent=2))
    print(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
