"""Reader ordering (docs/guarantees.md#readers, "offset order per partition") as properties of ``readers.ordering``,
over in-memory files (``tests/raw_views.py``): raw-like files (contiguous, disjoint, sorted) and compacted-like
files (overlapping, their rows in any order), split into batches at random, listed in any planning order.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import cast

from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.table import FileScanTask

from compactor.iceberg.bounds import task_range
from compactor.iceberg.scan import TaskReader
from compactor.topics.records import Record
from readers.ordering import clusters, ordered_units
from tests.raw_views import FakeReader, FakeTask, fake_task


def record(offset: int) -> Record:
    return Record(0, offset, 1_000 + offset, b"k%d" % (offset % 7), b"v%d" % offset)


@st.composite
def files(draw: st.DrawFn) -> list[list[Record]]:
    """One partition's offsets (unique) spread over files, as a raw or a compacted table would hold them."""
    offsets = sorted(draw(st.sets(st.integers(0, 300), max_size=60)))
    count = draw(st.integers(1, 6))
    if draw(st.booleans()):  # raw-like: contiguous runs
        cuts = sorted(set(draw(st.lists(st.integers(1, max(len(offsets) - 1, 1)), max_size=count - 1))))
        bounds = [0, *[c for c in cuts if c < len(offsets)], len(offsets)]
        return [[record(o) for o in offsets[lo:hi]] for lo, hi in itertools.pairwise(bounds) if hi > lo]
    owners = [draw(st.integers(0, count - 1)) for _ in offsets]  # compacted-like: any file may hold any offset
    out = []
    for f in range(count):
        rows = [record(o) for o, owner in zip(offsets, owners, strict=True) if owner == f]
        if rows:
            out.append(draw(st.permutations(rows)) if draw(st.booleans()) else rows)
    return out


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[list[Record]], list[FakeTask], list[FakeTask]]:
    """The files' records, their tasks, and the same tasks in a random planning order."""
    held = draw(files())
    tasks = [fake_task(rows, batch_rows=draw(st.integers(1, 7))) for rows in held]
    return held, tasks, list(draw(st.permutations(tasks)))


def keyed(groups: Sequence[Sequence[FakeTask]]) -> list[set[int]]:
    return [{id(t) for t in group} for group in groups]


@given(partitions())
def test_clusters_group_overlapping_files_in_offset_order(case: tuple[list[list[Record]], list[FakeTask],
                                                                      list[FakeTask]]) -> None:
    _, tasks, shuffled = case
    groups = clusters(shuffled)
    assert sorted(id(t) for group in groups for t in group) == sorted(id(t) for t in tasks), "a file lost or doubled"
    for group in groups:
        reach = task_range(group[0])[1]
        for task in group[1:]:
            lo, hi = task_range(task)
            assert lo <= reach, "a cluster holds a file that overlaps none before it"
            reach = max(reach, hi)
    for before, after in itertools.pairwise(groups):
        assert max(task_range(t)[1] for t in before) < min(task_range(t)[0] for t in after), \
            "clusters overlap or are out of offset order"
    assert keyed(groups) == keyed(clusters(tasks)), "the clusters depend on the planning order"


@given(st.lists(partitions(), min_size=1, max_size=3))
def test_every_row_comes_once_in_offset_order_whatever_the_planning_order(
        cases: list[tuple[list[list[Record]], list[FakeTask], list[FakeTask]]]) -> None:
    reader = cast(TaskReader, FakeReader())
    units = [[(reader, cast(FileScanTask, task)) for task in shuffled] for _, _, shuffled in cases]
    rows = [(r["offset"], r["key"], r["value"]) for batch in ordered_units(units) for r in batch.to_pylist()]
    expected = [(r.offset, r.key, r.value) for held, _, _ in cases
                for r in sorted((r for rows_ in held for r in rows_), key=lambda r: r.offset)]
    assert rows == expected
