"""Helpers shared by the producing, compaction, reader and retention tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor.cursor import Cursor, load_compacted
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.schema import DELETE_HORIZON
from compactor.topics.records import ProducerRecord, Record
from compactor.topics.topic import Topic
from readers.reader import TopicReader, batch_to_records
from tests.model import TopicModel

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def final_plan(frame: DataFrame) -> str:
    """The physical plan ``frame`` ran with, as text: adaptive execution's final plan once its job has run (the
    executed plan alone shows adaptive execution's initial one, before the rules that run on its stages)."""
    executed = frame._jdf.queryExecution().executedPlan()
    plan = executed.finalPhysicalPlan() if executed.nodeName() == "AdaptiveSparkPlan" else executed
    return str(plan.toString())


def topic_rows(topic: Topic) -> list[dict[str, Any]]:
    """Every raw row of ``topic`` as committed now (re-read), as Python dicts in (partition, offset) order."""
    table = topic.refresh().table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    out: list[dict[str, Any]] = table.to_pylist()
    return out


def parquet_source(spark: SparkSession, tmp_path: Path, rows: Sequence[tuple[bytes | None, bytes]],
                   files: int = 1) -> DataFrame:
    """``rows`` (key, value) written as Parquet (``files`` files, in order) and read back: a plain file scan."""
    frame = spark.createDataFrame(rows, "key binary, value binary").coalesce(files)
    frame.write.mode("overwrite").parquet(str(tmp_path / "in"))
    return spark.read.parquet(str(tmp_path / "in"))


def data_file_paths(topic: Topic) -> list[Path]:
    """Every Parquet file in a local topic's data directory, committed or not (sorted)."""
    return sorted((Path(topic.table.metadata.location.replace("file://", "")) / "data").rglob("*.parquet"))


@contextmanager
def rival_commits_first(rival: Callable[[], object], times: int = 1) -> Iterator[None]:
    """Within the block, each of the next ``times`` produce commits is preceded by ``rival()``, another produce
    that commits first (its own commit passes the failpoint), so each of those commits loses its race."""
    left = [times]

    def before_commit() -> None:
        if left[0] > 0:
            left[0] -= 1
            with failpoints.enabled({"produce-before-commit": lambda: None}):
                rival()

    with failpoints.enabled({"produce-before-commit": before_commit}):
        yield


def produce_both(lake: Lake, name: str, model: TopicModel, records: Sequence[ProducerRecord],
                 now_ms: int) -> list[Record]:
    """Produce into the real topic and the model; returns the records as stored."""
    topic = lake.topic(name)
    result = produce(topic, records, now_ms=now_ms)
    stored = [Record(p, o, r.timestamp_ms if r.timestamp_ms is not None else now_ms, r.key, r.value, r.headers)
              for r, (p, o) in zip(records, result.offsets, strict=True)]
    model.append(sorted(stored, key=lambda r: (r.partition, r.offset)))
    return stored


def compacted_rows(lake: Lake, name: str) -> list[tuple[Record, int | None]]:
    """Rows of the current cursor's snapshot, with their delete horizons, in (partition, offset) order."""
    state = load_compacted(lake.catalog, lake.topic(name).name)
    if state is None or state.cursor is None:
        return []
    table = state.table.scan(snapshot_id=state.cursor.snapshot_id).to_arrow()
    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    horizons = table.column(DELETE_HORIZON).to_pylist()
    topic_columns = table.select(["partition", "offset", "timestamp", "key", "value", "headers"])
    records: list[Record] = []
    for batch in topic_columns.to_batches():
        records.extend(batch_to_records(batch))
    return list(zip(records, horizons, strict=True))


def current_cursor(lake: Lake, name: str) -> Cursor | None:
    state = load_compacted(lake.catalog, lake.topic(name).name)
    return state.cursor if state else None


def view(lake: Lake, name: str, **kwargs: Any) -> list[Record]:
    return list(TopicReader(lake, name, read_compacted=True, **kwargs).records())


def raw(lake: Lake, name: str, **kwargs: Any) -> list[Record]:
    return list(TopicReader(lake, name, **kwargs).records())


def key_of(record: Record) -> tuple[int, bytes | None]:
    return record.partition, record.key


CLI_CHAIN = """
import contextlib, io, json, sys
from compactor.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    results.append({"code": code, "stdout": out.getvalue()})
print(json.dumps(results))
"""


def cli_chain(lake: Lake, *verbs: list[str],
              env: Mapping[str, str] | None = None) -> tuple[list[dict[str, object]], str]:
    """Run ``verbs`` (each a command line, against ``lake``) in one fresh process, in order, so that they share one
    JVM: each verb's exit code and standard output, and the process's standard error. The process starts from
    ``env`` (by default this process's environment), with the repository on ``PYTHONPATH`` and the lake's catalog
    name added."""
    run_env = {**(os.environ if env is None else env), "PYTHONPATH": os.getcwd(),
               "COMPACTOR_CATALOG_NAME": lake.config.catalog_name}
    argv = [["--warehouse", lake.config.warehouse, *verb] for verb in verbs]
    proc = subprocess.run([sys.executable, "-c", CLI_CHAIN, json.dumps(argv)], env=run_env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, object]] = json.loads(proc.stdout.splitlines()[-1])
    for verb, result in zip(verbs, results, strict=True):
        assert result["code"] == 0, (verb, proc.stderr[-3000:])
    return results, proc.stderr
