"""Compaction strategies against the default (BENCHMARK.md, "Strategies"): the same records compacted by offset
and by ``timestamp`` or ``header``, side by side in one Spark application.

    .venv/bin/python -m bench.compaction_bench --strategy timestamp --partitions 4   # the standard workload
    .venv/bin/python -m bench.compaction_bench --strategy header --records 1000000 --keys 400000 --repeats 3

Two topics get the same records (the standard workload with shuffled timestamps, or with a random 8-byte
``version`` header on every record); one compacts by ``offset``, the other by the strategy. Per repetition (the
order rotated): a full run of each; then, after the same 1% append to both, an incremental run of each from
its own first cursor. Ratios are strategy / offset within each repetition.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from bench.eventlog import read_stages, task_cpu_ms
from bench.workload import Workload, append

if TYPE_CHECKING:
    from bench.compaction_bench import Bench

STRATEGY_CONFIG = {"offset": {}, "timestamp": {"compaction.strategy": "timestamp"},
                   "header": {"compaction.strategy": "header", "compaction.strategy.header": "version"}}


def run_strategy(bench: Bench, partitions: int, strategy: str) -> dict[str, Any]:
    """Full and incremental runs by ``offset`` and by ``strategy`` on the same records, with their ratios."""
    from bench.compaction_bench import STANDARD_SHARE, summarise

    a = bench.args
    workload = Workload(records=a.records, partitions=partitions, keys_per_partition=a.keys // partitions,
                        shuffled=strategy)
    kinds = ("offset", strategy)
    names = {kind: f"bench.s{partitions}_{kind}" for kind in kinds}
    bench.lake.catalog.create_namespace_if_not_exists("bench")
    for kind, name in names.items():
        topic = bench.lake.create_topic(name, partitions=partitions,
                                        config={"cleanup.policy": "compact", **STRATEGY_CONFIG[kind]})
        append(topic, workload, workload.records, workload.seed)
        bench.log(f"{name}: {workload.records:,} records ({strategy} data), compacted by {kind}")
    kept = {kind: bench.full(name, f"p{partitions}-{kind}:warmup")[1]["records_kept"] for kind, name in names.items()}
    assert kept["offset"] == kept[strategy], f"both keep one row per key: {kept}"
    seconds: dict[str, dict[str, list[float]]] = {kind: {"full": [], "incremental": []} for kind in kinds}
    for rep in range(a.repeats):
        for kind in kinds[rep % 2:] + kinds[:rep % 2]:
            seconds[kind]["full"].append(bench.full(names[kind], f"p{partitions}-{kind}:full:{rep}")[0])
    cursors = {kind: bench.cursor_of(name) for kind, name in names.items()}
    stats: dict[str, Any] = {}
    for kind, name in names.items():
        append(bench.lake.topic(name), workload, int(a.records * STANDARD_SHARE), seed=99)
        bench.incremental(name, cursors[kind], f"p{partitions}-{kind}:warmup")
    for rep in range(a.repeats):
        for kind in kinds[rep % 2:] + kinds[:rep % 2]:
            took, stats[kind] = bench.incremental(names[kind], cursors[kind], f"p{partitions}-{kind}:incremental:{rep}")
            seconds[kind]["incremental"].append(took)
    ratios = {figure: summarise([s / o for s, o in zip(seconds[strategy][figure], seconds["offset"][figure],
                                                        strict=True)]) for figure in ("full", "incremental")}
    bench.log(f"p{partitions} {strategy}/offset: full {statistics.median(ratios['full']['runs']):.2f}, "
              f"incremental {statistics.median(ratios['incremental']['runs']):.2f}")
    return {"workload": workload.__dict__, "strategy": strategy, "records_kept": kept,
            "seconds": {kind: {f: summarise(v) for f, v in figures.items()} for kind, figures in seconds.items()},
            "ratios": ratios, "incremental_stats": stats}


def cpu_ratios(bench: Bench, partitions: int, strategy: str) -> dict[str, Any]:
    """Per figure, strategy / offset of the runs' executor CPU time (Spark's event log, complete once the
    application stopped): the work each run did, which a busy machine disturbs far less than wall time."""
    from bench.compaction_bench import summarise

    logs = [p for p in bench.events.iterdir() if not p.name.endswith(".inprogress")]
    stages = read_stages(logs[0]) if logs else []
    cpu = {label: task_cpu_ms(stages, start, end) for label, start, end in bench.windows}
    out: dict[str, Any] = {}
    for figure in ("full", "incremental"):
        reps = range(bench.args.repeats)
        pairs = [(cpu.get(f"p{partitions}-{strategy}:{figure}:{r}"), cpu.get(f"p{partitions}-offset:{figure}:{r}"))
                 for r in reps]
        ratios = [s / o for s, o in pairs if s and o]
        if ratios:
            out[figure] = {**summarise(ratios), "offset_cpu_s": summarise([o / 1000 for _, o in pairs if o]),
                           "strategy_cpu_s": summarise([s / 1000 for s, _ in pairs if s])}
    return out
