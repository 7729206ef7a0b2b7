"""Producer input, checked: the record rules (``topics.record_rules``) on whole columns of a normalised batch
(``producing.arrow_input``), plus a mirror batch's own rule; the first bad row fails the batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compactor.producing.arrow_input import HEADERS, KEY, OFFSET, PARTITION, TIMESTAMP_MS, VALUE, RowNumbers
from compactor.topics.record_rules import column_problems, record_sizes


def batch_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's bytes (``record_rules.record_sizes``)."""
    return record_sizes(batch.column(KEY), batch.column(VALUE), batch.column(HEADERS))


def validate(batch: pa.RecordBatch, sizes: np.ndarray, partitions: int, max_message_bytes: int,
             rows: RowNumbers, *, keep_offsets: bool = False) -> None:
    """Reject the batch at its first bad row: a partition out of range, an oversized record, a timestamp out of
    range, or (mirror batches) a row without its partition and offset."""
    problems = column_problems(batch.column(PARTITION), sizes, batch.column(TIMESTAMP_MS), partitions,
                               max_message_bytes)
    if keep_offsets:
        for name in (PARTITION, OFFSET):
            missing = np.nonzero(batch.column(name).is_null().to_numpy(zero_copy_only=False))[0]
            if len(missing):
                problems.append((int(missing[0]), f"a mirror batch (keep offsets) needs '{name}' on every record"))
    if problems:
        index, message = min(problems, key=lambda item: item[0])
        raise rows.error(index, message)


__all__ = ["batch_sizes", "validate"]
