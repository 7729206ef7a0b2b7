"""The incremental figures against the `MERGE INTO` a data engineer would keep instead (issue 34).

A user who wants each key's latest record keeps a table and upserts into it, from the rows that arrived since
last time, with Spark's `MERGE INTO`. This module times the product's incremental run side by side with that
statement, copy-on-write and merge-on-read, in the benchmark's Spark application, for several append sizes:

    MERGE INTO latest t
    USING (SELECT partition, offset, timestamp, key, value, headers FROM (
             SELECT *, row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn
             FROM topic WHERE key IS NOT NULL AND ((partition = 0 AND offset >= lo0 AND offset < hi0) OR ...))
           WHERE rn = 1) s
    ON t.partition = s.partition AND t.key = s.key
    WHEN MATCHED AND s.value IS NULL THEN DELETE
    WHEN MATCHED THEN UPDATE SET *
    WHEN NOT MATCHED AND s.value IS NOT NULL THEN INSERT *

The topic is compacted with ``delete.retention.ms=0`` so that both sides drop tombstones (and keyless records).
Each `latest` table starts as the naive job's result over the records the first cursor holds. Per append share,
in order (each share's records appended after the previous share's): the topic gets the share's records; one
untimed run of each side (warm-up; ``--warmups`` rounds of them); then per repetition, in rotated order, the
product's incremental run and both statements, each from the same starting snapshot (the cursor, and each table's
``main``, reset before it). The last repetition's result is the next share's start on every side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.workload import Workload, append
from compactor.iceberg.commits import RefMove, commit

if TYPE_CHECKING:
    from bench.compaction_bench import Bench

MERGE_MODES = {"merge-mor": "merge-on-read", "merge-cow": "copy-on-write"}
COLUMNS = "partition, offset, timestamp, key, value, headers"


class MergeAnchor:
    """The `latest` tables of one topic, one per write mode, and the statements that upsert into them."""

    def __init__(self, bench: Bench, raw: str, tag: str) -> None:
        self.bench = bench
        self.raw = raw
        self.tables = {figure: f"bench.{tag}_latest_{mode.replace('-', '_')}" for figure, mode in MERGE_MODES.items()}

    def spark_name(self, identifier: str) -> str:
        return f"{self.bench.catalog}.{identifier}"

    def create(self) -> None:
        """Each table as the naive job's result over the whole topic now (tombstones and keyless rows dropped)."""
        raw = self.spark_name(self.raw)
        for figure, table in self.tables.items():
            mode = MERGE_MODES[figure]
            self.bench.spark.sql(f"DROP TABLE IF EXISTS {self.spark_name(table)} PURGE")
            self.bench.spark.sql(
                f"CREATE TABLE {self.spark_name(table)} USING iceberg PARTITIONED BY (partition) TBLPROPERTIES "
                f"('format-version'='2', 'write.merge.mode'='{mode}', 'write.update.mode'='{mode}', "
                f"'write.delete.mode'='{mode}') AS SELECT {COLUMNS} FROM (SELECT *, row_number() OVER "
                f"(PARTITION BY partition, key ORDER BY offset DESC) AS rn FROM {raw} WHERE key IS NOT NULL) "
                "WHERE rn = 1 AND value IS NOT NULL")

    def head(self, figure: str) -> int:
        return int(self.bench.lake.catalog.load_table(self.tables[figure]).metadata.refs["main"].snapshot_id)

    def statement(self, figure: str, ranges: dict[int, tuple[int, int]]) -> str:
        within = " OR ".join(f"(partition = {p} AND offset >= {lo} AND offset < {hi})"
                             for p, (lo, hi) in sorted(ranges.items()) if hi > lo)
        return (f"MERGE INTO {self.spark_name(self.tables[figure])} t USING (SELECT {COLUMNS} FROM (SELECT *, "
                "row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn "
                f"FROM {self.spark_name(self.raw)} WHERE key IS NOT NULL AND ({within})) WHERE rn = 1) s "
                "ON t.partition = s.partition AND t.key = s.key "
                "WHEN MATCHED AND s.value IS NULL THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET * "
                "WHEN NOT MATCHED AND s.value IS NOT NULL THEN INSERT *")

    def merge(self, figure: str, start: int, ranges: dict[int, tuple[int, int]], label: str) -> float:
        """One `MERGE INTO` from the snapshot ``start`` of the table (its ``main`` reset there first, untimed)."""
        table = self.bench.lake.catalog.load_table(self.tables[figure])
        current = table.metadata.refs["main"].snapshot_id
        if current != start:
            commit(self.bench.lake.catalog, table, snapshot=None, moves=[RefMove("main", start)],
                   expect={"main": current}, what="resetting the benchmark's MERGE table")
        query = self.statement(figure, ranges)
        return self.bench.timed(label, lambda: self.bench.spark.sql(query))[0]


def incremental_figures(bench: Bench, raw: str, workload: Workload, tag: str) -> dict[str, Any]:
    """Per append share (``--append-shares``): the product's incremental run and both `MERGE INTO`s, each from
    the same start every repetition (module docstring). Returns seconds per figure and the ratios per share."""
    anchor = MergeAnchor(bench, raw, tag)
    anchor.create()
    topic = bench.lake.topic(raw)
    out: dict[str, Any] = {}
    for index, share in enumerate(bench.args.append_shares):
        before = topic.refresh().offsets().next_offsets
        starts = {"incremental": bench.cursor_of(raw), **{figure: anchor.head(figure) for figure in MERGE_MODES}}
        append(topic, workload, int(bench.args.records * share), seed=99 + index)
        after = topic.refresh().offsets().next_offsets
        ranges = {p: (lo, hi) for p, (lo, hi) in enumerate(zip(before, after, strict=True))}
        out[f"{share:g}"] = _share_figures(bench, anchor, f"{tag}:{share:g}", starts, ranges)
        bench.log(f"{tag} +{share:.2%}: " + " ".join(f"{n} {v['median']:.2f}" for n, v in
                                                  out[f"{share:g}"]["ratios"].items()))
    return out


def _share_figures(bench: Bench, anchor: MergeAnchor, prefix: str, starts: dict[str, int],
                   ranges: dict[int, tuple[int, int]]) -> dict[str, Any]:
    from bench.compaction_bench import summarise

    def step(name: str, label: str) -> float:
        if name == "incremental":
            return bench.incremental(anchor.raw, starts[name], label)[0]
        return anchor.merge(name, starts[name], ranges, label)

    order = ["incremental", *MERGE_MODES]
    for warmup in range(bench.args.warmups):  # untimed, in the same order every round
        for name in order:
            step(name, f"{prefix}:{name}-warmup{warmup}")
    seconds: dict[str, list[float]] = {name: [] for name in order}
    for rep in range(bench.args.repeats):
        for name in order[rep % len(order):] + order[:rep % len(order)]:  # rotate: no fixed predecessor
            seconds[name].append(step(name, f"{prefix}:{name}:{rep}"))
        bench.log(f"{prefix} rep {rep + 1}: " + " ".join(f"{n} {seconds[n][-1]:.2f}s" for n in order))
    ratios = {f"incremental/{figure}": summarise([i / m for i, m in zip(seconds["incremental"], seconds[figure],
                                                                        strict=True)]) for figure in MERGE_MODES}
    return {"records": sum(hi - lo for lo, hi in ranges.values()),
            "seconds": {name: summarise(values) for name, values in seconds.items()}, "ratios": ratios}


def cpu_figures(bench: Bench, tag: str, cpu: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per append share and kind of CPU time (``cpu``: kind -> timed label -> seconds; the executors' from the
    event log, and the processes'): each figure's seconds, and the product's over each `MERGE INTO`'s,
    repetition by repetition."""
    from bench.compaction_bench import summarise

    out: dict[str, Any] = {}
    for share in bench.args.append_shares:
        key = f"{share:g}"
        out[key] = {}
        for kind, labels in cpu.items():
            seconds = {name: [labels.get(f"{tag}:{key}:{name}:{rep}", 0.0) for rep in range(bench.args.repeats)]
                       for name in ("incremental", *MERGE_MODES)}
            out[key][kind] = {name: summarise(values) for name, values in seconds.items()}
            out[key][kind.replace("seconds", "ratios")] = {
                f"incremental/{figure}": summarise([i / m for i, m in zip(seconds["incremental"], seconds[figure],
                                                                          strict=True) if m])
                for figure in MERGE_MODES}
    return out
