"""Spark's event log, read back: per stage, its tasks, the input records each task read, where it ran; per job,
when it ran; and a figure's timeline (``python -m bench.eventlog``: its jobs, and the time no job was running).

The benchmarks run with ``spark.eventLog.enabled`` and attribute stages to a figure by submission time (the
product runs its passes in threads of its own, so a job group set by the caller would not reach them).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def _events(path: Path) -> Iterator[dict[str, Any]]:
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
    for event in _events(path):
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


def reading_stages(stages: list[StageFigures], start_ms: int, end_ms: int) -> list[StageFigures]:
    """The stages submitted in ``[start_ms, end_ms]`` that read table data (input records > 0)."""
    return [s for s in stages if start_ms <= s.submitted_ms <= end_ms and s.total_input > 0]


def task_cpu_ms(stages: list[StageFigures], start_ms: int, end_ms: int) -> float:
    """The executor CPU time of every stage submitted in ``[start_ms, end_ms]``, summed over their tasks."""
    return sum(s.cpu_ms for s in stages if start_ms <= s.submitted_ms <= end_ms)


@dataclass
class JobSpan:
    """One Spark job: its description, when it ran, and its stages' ids."""

    job: int
    description: str
    submitted_ms: int
    completed_ms: int = 0
    stages: list[int] = field(default_factory=list)


def read_jobs(path: Path) -> list[JobSpan]:
    """Every job of one application's event log, in submission order."""
    jobs: dict[int, JobSpan] = {}
    for event in _events(path):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            text = props.get("spark.job.description") or props.get("callSite.short") or ""
            jobs[event["Job ID"]] = JobSpan(event["Job ID"], str(text), int(event["Submission Time"]),
                                            stages=list(event.get("Stage IDs", [])))
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]].completed_ms = int(event["Completion Time"])
    return sorted(jobs.values(), key=lambda j: (j.submitted_ms, j.job))


def timeline(path: Path, start_ms: int, end_ms: int) -> list[str]:
    """A figure's window ``[start_ms, end_ms]`` as lines: each job's start and end relative to the window's start,
    its description, and its stages' tasks, task run time and CPU time; then the time no job was running."""
    stages = {s.stage: s for s in read_stages(path)}
    lines, busy = [], []
    for job in read_jobs(path):
        if not start_ms <= job.submitted_ms <= end_ms:
            continue
        done = [stages[s] for s in job.stages if s in stages]
        ended = job.completed_ms or end_ms
        busy.append((job.submitted_ms, ended))
        lines.append(f"{job.submitted_ms - start_ms:6d}-{ended - start_ms:6d} ms  job {job.job}: "
                     f"{job.description[:70]}  ({sum(s.tasks for s in done)} tasks, "
                     f"run {sum(s.run_ms for s in done):.0f} ms, cpu {sum(s.cpu_ms for s in done):.0f} ms, "
                     f"input {sum(s.total_input for s in done):,} records)")
    idle, cursor = 0, start_ms
    for begin, end in sorted(busy):
        idle += max(begin - cursor, 0)
        cursor = max(cursor, end)
    idle += max(end_ms - cursor, 0)
    lines.append(f"window {end_ms - start_ms} ms, no Spark job running for {idle} ms (driver: planning, commits)")
    return lines


def main() -> None:
    """``python -m bench.eventlog EVENT_LOG RESULTS.json LABEL...``: the timeline of each labelled figure (the
    benchmark's results hold each figure's window)."""
    import argparse

    parser = argparse.ArgumentParser(description="a figure's jobs from Spark's event log")
    parser.add_argument("event_log", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("labels", nargs="+")
    args = parser.parse_args()
    windows = {label: (start, end) for label, start, end in json.loads(args.results.read_text())["windows"]}
    for label in args.labels:
        print(label)
        for line in timeline(args.event_log, *windows[label]):
            print("  " + line)


if __name__ == "__main__":
    main()
