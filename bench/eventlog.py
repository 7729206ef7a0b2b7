"""Spark's event log, read back: per stage, its tasks, the input records each task read, where it ran; per job,
when it ran; and a figure's timeline (``python -m bench.eventlog``: its jobs, and the time no job was running).

The benchmarks run with ``spark.eventLog.enabled`` and attribute stages to a figure by submission time (the
product runs its passes in threads of its own, so a job group set by the caller would not reach them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tests.measure import StageFigures, events, read_stages


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
    for event in events(path):
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


__all__ = ["JobSpan", "StageFigures", "events", "read_jobs", "read_stages", "reading_stages", "task_cpu_ms", "timeline"]

if __name__ == "__main__":
    main()
