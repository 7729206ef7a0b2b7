"""Producer input, checked: each row's bytes against ``max.message.bytes`` and the record rules of SEMANTICS
section 1, on whole columns of a normalised batch (``producing.columns``); the first bad row fails the batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.clock import MAX_TIMESTAMP_MS
from compactor.producing.columns import HEADERS, KEY, OFFSET, PARTITION, TIMESTAMP_MS, VALUE, RowNumbers
from compactor.topics.records import partition_out_of_range, record_too_large, timestamp_out_of_range


def _lengths(column: pa.Array) -> np.ndarray:
    lengths: np.ndarray = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths


def record_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Bytes of each row that count against ``max.message.bytes``: key + value + header keys and values."""
    sizes: np.ndarray = _lengths(batch.column(KEY)) + _lengths(batch.column(VALUE))
    headers = batch.column(HEADERS)
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            per_item = _lengths(flat.field("key")) + _lengths(flat.field("value"))
            parents = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
            sizes += np.bincount(parents, weights=per_item, minlength=len(sizes)).astype(np.int64)
    return sizes


def validate(batch: pa.RecordBatch, sizes: np.ndarray, partitions: int, max_message_bytes: int,
             rows: RowNumbers, *, keep_offsets: bool = False) -> None:
    """Reject the batch at its first bad row: a partition out of range, an oversized record, a timestamp out of
    range, or (mirror batches) a row without its partition and offset."""
    problems: list[tuple[int, str]] = []
    partition = batch.column(PARTITION)
    if partition.null_count < len(partition):
        values = partition.fill_null(0).to_numpy(zero_copy_only=False)
        valid = partition.is_valid().to_numpy(zero_copy_only=False)
        bad = np.nonzero(valid & ((values < 0) | (values >= partitions)))[0]
        if len(bad):
            i = int(bad[0])
            problems.append((i, partition_out_of_range(int(values[i]), partitions)))
    big = np.nonzero(sizes > max_message_bytes)[0]
    if len(big):
        i = int(big[0])
        problems.append((i, record_too_large(int(sizes[i]), max_message_bytes)))
    stamps = batch.column(TIMESTAMP_MS)
    if stamps.null_count < len(stamps):
        values = stamps.fill_null(0).to_numpy(zero_copy_only=False)
        bad = np.nonzero((values < 0) | (values > MAX_TIMESTAMP_MS))[0]
        if len(bad):
            i = int(bad[0])
            problems.append((i, timestamp_out_of_range(int(values[i]))))
    if keep_offsets:
        for name in (PARTITION, OFFSET):
            missing = np.nonzero(batch.column(name).is_null().to_numpy(zero_copy_only=False))[0]
            if len(missing):
                problems.append((int(missing[0]), f"a mirror batch (keep offsets) needs '{name}' on every record"))
    if problems:
        index, message = min(problems, key=lambda item: item[0])
        raise rows.error(index, message)




__all__ = ["record_sizes", "validate"]
