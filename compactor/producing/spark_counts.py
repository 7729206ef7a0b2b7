"""What the DataFrame producer's counting pass and its writer share: the counts (``Counts``), how a row id
encodes its Spark partition (``ROW_BITS``), and the error for a bad row (``bad_row``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from compactor.errors import InvalidRecordError
from compactor.topics.record_rules import SIZE, problem_message, record_too_large

ROW_BITS = 33  # monotonically_increasing_id() = (Spark partition << 33) + position within the partition


@dataclass(frozen=True)
class Counts:
    """Rows per (Spark partition, topic partition) and per topic partition, from the counting pass; ``values``:
    whether the pass read every column (else only those the placement and the checks need)."""

    cells: dict[tuple[int, int], int]
    counts: np.ndarray
    values: bool = True


def bad_row(kind: str, value: Any, partitions: int, max_message_bytes: int, spark_partition: int,
            row: int) -> InvalidRecordError:
    """The error for a bad input row of ``kind`` (``record_rules``) whose offending value is ``value``, named by
    its Spark partition and its 1-based row within it, whether the counting pass or the writer found it."""
    where = f" (Spark partition {spark_partition}, row {row} of that partition); nothing was written"
    if kind == SIZE:
        return InvalidRecordError(f"a {record_too_large(value, max_message_bytes, where)}")
    return InvalidRecordError(problem_message(kind, value, partitions, max_message_bytes) + where)



__all__ = [
    "ROW_BITS",
    "Counts",
    "bad_row",
]
