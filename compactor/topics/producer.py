"""Producing: append one atomic batch of records to a topic, with dense per-partition offsets.

A batch is validated whole before anything is written (partition range, record size), then:

1. the table is (re)loaded and ``N_p`` read from its properties,
2. records get partitions (explicit, Kafka's murmur2 of the key, or round-robin for keyless records) and
   offsets ``N_p, N_p + 1, ...`` in input order,
3. one data file per partition is written and committed together with the new ``N_p`` in one Iceberg
   commit that requires ``main`` to still be the snapshot the offsets were computed from.

If another appender won the race the commit fails, its files are discarded, and the batch is re-planned
from step 1 (never re-committed with stale offsets); after ``max_attempts`` it is an "append conflict".
A batch id makes re-sending safe: if a batch with that id already committed, nothing is appended and the
original offsets are returned (Kafka's idempotent producer, over the table's retained snapshots).
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from compactor import properties as props
from compactor import schema as ts
from compactor.clock import resolve_now_ms
from compactor.errors import (
    AppendConflictError,
    BatchIdConflictError,
    InvalidRecordError,
    OutcomeUnknownError,
)
from compactor.iceberg.catalog import first_line, is_storage_failure, storage_error, translate_storage_errors
from compactor.topics.partitioner import partition_for_key
from compactor.topics.records import ProducerRecord
from compactor.topics.state import encode_offsets, read_offsets
from compactor.topics.topic import Topic

MAX_BATCH_ID_LENGTH = 256
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProduceResult:
    """Where each input record landed, in input order, and how the commit went."""

    offsets: list[tuple[int, int]]
    snapshot_id: int | None
    duplicate: bool
    attempts: int
    now_ms: int


@dataclass(frozen=True)
class _Plan:
    partitions: list[int]
    offsets: list[int]
    base: list[int]
    counts: list[int]
    rr_start: int
    sizes: list[int]


def assign_partitions(records: Sequence[ProducerRecord], partitions: int, rr_start: int) -> list[int]:
    """Explicit partition, else murmur2 of the key, else round-robin from ``rr_start``."""
    out: list[int] = []
    next_rr = rr_start
    for record in records:
        if record.partition is not None:
            out.append(record.partition)
        elif record.key is not None:
            out.append(partition_for_key(record.key, partitions))
        else:
            out.append(next_rr % partitions)
            next_rr += 1
    return out


def _plan(records: Sequence[ProducerRecord], next_offsets: Sequence[int], rr_start: int) -> _Plan:
    partitions = assign_partitions(records, len(next_offsets), rr_start)
    cursor = list(next_offsets)
    counts = [0] * len(next_offsets)
    sizes = [0] * len(next_offsets)
    offsets: list[int] = []
    for p, record in zip(partitions, records, strict=True):
        offsets.append(cursor[p])
        cursor[p] += 1
        counts[p] += 1
        sizes[p] += record.size
    return _Plan(partitions, offsets, list(next_offsets), counts, rr_start, sizes)


def build_arrow_table(records: Sequence[ProducerRecord], plan: _Plan, now_ms: int) -> pa.Table:
    """The batch as an Arrow table sorted by (partition, offset): one contiguous run per partition."""
    order = sorted(range(len(records)), key=lambda i: (plan.partitions[i], plan.offsets[i]))
    rows = [records[i] for i in order]
    headers = [
        [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in rows
    ]
    return pa.Table.from_arrays(
        [
            pa.array([plan.partitions[i] for i in order], pa.int32()),
            pa.array([plan.offsets[i] for i in order], pa.int64()),
            pa.array([(r.timestamp_ms if r.timestamp_ms is not None else now_ms) * 1000 for r in rows],
                     pa.timestamp("us", tz="UTC")),
            pa.array([r.key for r in rows], pa.large_binary()),
            pa.array([r.value for r in rows], pa.large_binary()),
            pa.array(headers, ts.ARROW_SCHEMA.field(ts.HEADERS).type),
        ],
        schema=ts.ARROW_SCHEMA,
    )


def validate_batch(records: Sequence[ProducerRecord], partitions: int, max_message_bytes: int,
                   line_numbers: Sequence[int] | None = None) -> None:
    """Reject the batch if any record names a missing partition or is too large (nothing is written)."""
    for index, record in enumerate(records):
        line = line_numbers[index] if line_numbers is not None else index + 1
        if record.partition is not None and not 0 <= record.partition < partitions:
            raise InvalidRecordError(
                f"partition {record.partition} is out of range: the topic has {partitions} partition(s) "
                f"(0..{partitions - 1})", line)
        size = record.size
        if size > max_message_bytes:
            raise InvalidRecordError(
                f"record of {size} bytes exceeds max.message.bytes ({max_message_bytes})", line)


def find_batch(table: Table, batch_id: str) -> Snapshot | None:
    """The snapshot of ``main``'s history that committed ``batch_id``, if still retained."""
    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(props.SUMMARY_BATCH_ID) == batch_id:
            return snapshot
    return None


def _replay(records: Sequence[ProducerRecord], snapshot: Snapshot, partitions: int) -> list[tuple[int, int]]:
    """Recompute the offsets a committed batch received, checking it is the same batch."""
    summary = snapshot.summary
    try:
        info = json.loads(summary.additional_properties[props.SUMMARY_BATCH]) if summary else None
        base, counts, rr_start = info["base"], info["counts"], int(info["rr"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        raise BatchIdConflictError("the batch id was committed by an older format and cannot be replayed") from None
    plan = _plan(records, base, rr_start)
    if plan.counts != counts:
        raise BatchIdConflictError(
            f"batch id was already used for a different batch ({sum(counts)} records in partitions {counts}; "
            f"this batch has {len(records)} records in partitions {plan.counts})"
        )
    return list(zip(plan.partitions, plan.offsets, strict=True))


def produce(
    topic: Topic,
    records: Sequence[ProducerRecord],
    *,
    batch_id: str | None = None,
    now_ms: int | None = None,
    line_numbers: Sequence[int] | None = None,
    max_attempts: int = 60,
) -> ProduceResult:
    """Append ``records`` as one atomic batch; see the module docstring for the protocol."""
    now = resolve_now_ms(now_ms)
    if batch_id is not None and not (0 < len(batch_id) <= MAX_BATCH_ID_LENGTH):
        raise InvalidRecordError(f"a batch id must have 1 to {MAX_BATCH_ID_LENGTH} characters")
    settings = topic.settings
    partitions = topic.offsets().partitions
    validate_batch(records, partitions, settings.max_message_bytes, line_numbers)
    if not records:
        return ProduceResult([], None, False, 0, now)

    commit_id = uuid.uuid4().hex
    for attempt in range(1, max_attempts + 1):
        if attempt > 1:
            topic.refresh()
        table = topic.table
        if batch_id is not None:
            previous = find_batch(table, batch_id)
            if previous is not None:
                return ProduceResult(_replay(records, previous, partitions), previous.snapshot_id, True,
                                     attempt, now)
        state = read_offsets(table.metadata.properties)
        plan = _plan(records, state.next_offsets, sum(state.next_offsets) % partitions)
        new_next = [b + c for b, c in zip(plan.base, plan.counts, strict=True)]
        new_bytes = [b + s for b, s in zip(state.logical_bytes, plan.sizes, strict=True)]
        arrow = build_arrow_table(records, plan, now)
        summary = {
            props.SUMMARY_OPERATION: "produce",
            props.SUMMARY_NOW: str(now),
            props.SUMMARY_COMMIT_ID: commit_id,
            props.SUMMARY_BATCH: json.dumps({"base": plan.base, "counts": plan.counts, "rr": plan.rr_start,
                                       "bytes": plan.sizes}, separators=(",", ":")),
            props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next),
        }
        if batch_id is not None:
            summary[props.SUMMARY_BATCH_ID] = batch_id
        with translate_storage_errors(f"writing to {topic.name}"):
            tx = table.transaction()
            tx.set_properties({props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next),
                               props.LOGICAL_BYTES_PROPERTY: encode_offsets(new_bytes)})
            tx.append(arrow, snapshot_properties=summary)
        written = _written_data_files(tx)
        try:
            tx.commit_transaction()
        except CommitFailedException:
            # Definitely not committed: the files carry offsets that are now stale; remove them now
            # rather than leaving them to orphan cleanup.
            _delete_quietly(table, written)
            _backoff(attempt)
            continue
        except Exception as exc:
            snapshot_id = _learn_outcome(topic, commit_id, exc)
            if snapshot_id is None:
                if is_storage_failure(exc):
                    raise storage_error(f"appending to {topic.name}", exc) from exc
                raise
            return ProduceResult(list(zip(plan.partitions, plan.offsets, strict=True)), snapshot_id, False,
                                 attempt, now)
        topic.refresh()
        landed = _snapshot_with_commit_id(topic.table, commit_id)
        return ProduceResult(list(zip(plan.partitions, plan.offsets, strict=True)),
                             landed.snapshot_id if landed else None, False, attempt, now)
    raise AppendConflictError(
        f"append conflict: {max_attempts} attempts to append to {topic.name} lost the race with other "
        "appenders; nothing was written. Retry later, or produce larger, fewer batches."
    )


def _written_data_files(tx: object) -> list[str]:
    """Paths of the data files a pending transaction wrote (pyiceberg keeps them on its producers)."""
    paths: list[str] = []
    for producer in getattr(tx, "_snapshot_producers", []):
        paths.extend(f.file_path for f in getattr(producer, "_added_data_files", []))
    return paths


def _delete_quietly(table: Table, paths: Sequence[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except Exception:  # best effort: orphan cleanup removes whatever is left
            logger.debug("could not delete uncommitted file %s", path, exc_info=True)


def _backoff(attempt: int) -> None:
    delay = min(0.5, 0.005 * (2 ** min(attempt, 10)))
    time.sleep(delay * (0.5 + random.random()))


def _snapshot_with_commit_id(table: Table, commit_id: str) -> Snapshot | None:
    for snapshot in reversed(table.metadata.snapshots):
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get(props.SUMMARY_COMMIT_ID) == commit_id:
            return snapshot
    return None


def _learn_outcome(topic: Topic, commit_id: str, exc: BaseException) -> int | None:
    """After an ambiguous commit failure: the snapshot id if it landed, None if it did not.

    Raises ``OutcomeUnknownError`` when the table cannot even be re-read.
    """
    try:
        topic.refresh()
    except Exception as reload_exc:
        raise OutcomeUnknownError(
            f"the append to {topic.name} failed with '{first_line(exc)}' and the table could not be re-read "
            f"('{first_line(reload_exc)}'); re-send with the same --batch-id to make the retry safe"
        ) from exc
    landed = _snapshot_with_commit_id(topic.table, commit_id)
    return landed.snapshot_id if landed else None


__all__ = ["ProduceResult", "assign_partitions", "produce", "validate_batch"]
