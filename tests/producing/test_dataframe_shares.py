"""The DataFrame producer's write as copies side by side: an input with fewer busy tasks than cores (a Parquet
file of one row group) is read by as many copies as cores would idle, each writing one contiguous part of every
cell's offsets. The topic gets exactly what a one-copy write gives it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from compactor.errors import InvalidRecordError
from compactor.lake import Lake
from compactor.producing import dataframe
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.spark_counts import Counts
from tests.helpers import data_file_paths, parquet_source, topic_rows

pytestmark = pytest.mark.spark


def counts(cells: dict[tuple[int, int], int], partitions: int = 2) -> Counts:
    totals = np.zeros(partitions, np.int64)
    for (_, p), n in cells.items():
        totals[p] += n
    return Counts(cells, totals, False)


def test_how_many_copies_the_write_reads() -> None:
    rows = dataframe.SHARE_MIN_ROWS
    one_task = counts({(0, 0): rows, (0, 1): rows})  # two copies' worth of rows, in one task
    assert dataframe._shares(2, one_task, True) == 2
    assert dataframe._shares(2, one_task, False) == 1  # reading it again is more than a file scan
    assert dataframe._shares(1, one_task, True) == 1  # no idle core
    assert dataframe._shares(2, counts({(0, 0): rows, (1, 1): rows}), True) == 1  # two busy tasks, two cores
    assert dataframe._shares(2, counts({(0, 0): rows - 1}), True) == 1  # too few rows for a second copy
    assert dataframe._shares(64, counts({(0, 0): 100 * rows}), True) == dataframe.MAX_SHARES
    assert dataframe._shares(4, counts({(0, 0): 3 * rows}), True) == 3


@pytest.mark.parametrize("partitions", [1, 3])
def test_copies_write_what_one_copy_writes(spark: SparkSession, lake: Lake, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, partitions: int) -> None:
    assert spark.sparkContext.defaultParallelism == 2
    rows: list[tuple[bytes | None, bytes]] = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(101)]
    rows[40:40] = [(None, b"keyless %d" % i) for i in range(5)]
    df = parquet_source(spark, tmp_path, rows, files=1)  # one file: one task
    monkeypatch.setattr(dataframe, "SHARE_MIN_ROWS", 10**12)
    lake.create_topic("c.one", partitions=partitions)
    produce_dataframe(lake, "c.one", df, now_ms=1000)
    monkeypatch.setattr(dataframe, "SHARE_MIN_ROWS", 1)
    lake.create_topic("c.two", partitions=partitions)
    summary = produce_dataframe(lake, "c.two", df, now_ms=1000)
    assert summary.records == len(rows)
    assert topic_rows(lake.topic("c.two")) == topic_rows(lake.topic("c.one"))
    # each copy wrote one file per partition, each a contiguous part of the partition's offsets
    written = [pq.read_table(path, columns=["partition", "offset"]).to_pydict() for path in
               data_file_paths(lake.topic("c.two"))]
    assert Counter(file["partition"][0] for file in written) == dict.fromkeys(range(partitions), 2)
    for file in written:
        assert len(set(file["partition"])) == 1
        assert file["offset"] == list(range(file["offset"][0], file["offset"][0] + len(file["offset"])))
    assert len(lake.topic("c.two").raw_files()) == 2 * partitions


def test_an_oversized_record_found_by_a_copy_is_named_as_in_the_input(spark: SparkSession, lake: Lake,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The second copy writes the record; the error still names its Spark partition and row of the input, and
    no file of either copy is left."""
    monkeypatch.setattr(dataframe, "SHARE_MIN_ROWS", 1)
    rows = [(b"k%d" % i, b"v") for i in range(40)] + [(b"big", b"x" * 60)] + [(b"k", b"v")] * 2
    lake.create_topic("c.big", partitions=1, config={"max.message.bytes": "50"})
    with pytest.raises(InvalidRecordError,
                       match=r"a record of 63 bytes exceeds max\.message\.bytes \(50\) \(Spark partition 0, "
                             r"row 41 of that partition\); nothing was written"):
        produce_dataframe(lake, "c.big", parquet_source(spark, tmp_path, rows, files=1))
    assert lake.topic("c.big").snapshot is None and data_file_paths(lake.topic("c.big")) == []
