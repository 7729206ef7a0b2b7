"""Measurements that the tests and the benchmarks (``bench/``) share: a command's peak memory, and Spark's event
log read back per stage (its tasks, the input records each read, where it ran). ``bench/`` imports them from here,
so the tests never import ``bench/``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A child's peak RSS counts the memory of the process it was forked from, so a small Python process starts the
# command and reports the peak of its own child.
_PEAK = ("import resource, subprocess, sys\n"
         "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if code == 0 else -code)")



def peak_rss_kib(command: list[str], env: dict[str, str]) -> int:
    """Peak resident memory (KiB) of ``command``, which must exit 0."""
    out = subprocess.run([sys.executable, "-c", _PEAK, *command], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    if int(out) < 0:
        raise RuntimeError(f"{' '.join(command)} exited {-int(out)}")
    return int(out)


@dataclass
class StageFigures:
    """One stage attempt: its tasks' input records, durations and executors."""

    stage: int
    name: str
    submitted_ms: int
    tasks: int = 0
    input_records: list[int] = field(default_factory=list)
    cpu_ms: float = 0.0  # the tasks' executor CPU time, summed (less sensitive to a busy machine than wall time)
    run_ms: float = 0.0  # the tasks' executor run time, summed
    completed_ms: int = 0
    planned_tasks: int = 0  # the stage's partitions (``tasks`` counts the attempts that ended, retries included)
    executors: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)

    @property
    def total_input(self) -> int:
        return sum(self.input_records)

    @property
    def largest_share(self) -> float:
        """The largest task's share of the stage's input records (1.0 when one task reads everything)."""
        return max(self.input_records) / self.total_input if self.total_input else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "name": self.name, "tasks": self.tasks, "input_records": self.total_input,
                "largest_task_share": round(self.largest_share, 3), "executors": sorted(self.executors)}


def events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a log, which may still be being written (``.inprogress``): a partial last line ends it."""
    with path.open() as handle:
        for line in handle:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                return


def read_stages(path: Path) -> list[StageFigures]:
    """Every completed stage of one application's event log, in submission order."""
    tasks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    stages: dict[tuple[int, int], StageFigures] = {}
    for event in events(path):
        kind = event.get("Event")
        if kind == "SparkListenerTaskEnd":
            tasks[(event["Stage ID"], event["Stage Attempt ID"])].append(event)
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            key = (info["Stage ID"], info["Stage Attempt ID"])
            stages[key] = StageFigures(info["Stage ID"], info["Stage Name"], int(info.get("Submission Time", 0)),
                                       completed_ms=int(info.get("Completion Time", 0)),
                                       planned_tasks=int(info.get("Number of Tasks", 0)))
    for key, figures in stages.items():
        for event in tasks.get(key, []):
            metrics = event.get("Task Metrics") or {}
            figures.tasks += 1
            figures.input_records.append(int((metrics.get("Input Metrics") or {}).get("Records Read", 0)))
            figures.cpu_ms += int(metrics.get("Executor CPU Time", 0)) / 1e6
            figures.run_ms += int(metrics.get("Executor Run Time", 0))
            figures.executors.add(str(event["Task Info"].get("Executor ID")))
            figures.hosts.add(str(event["Task Info"].get("Host")))
    return sorted(stages.values(), key=lambda s: (s.submitted_ms, s.stage))
