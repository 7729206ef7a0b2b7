"""A buffered producer in Kafka's terms: ``send`` returns a future; sends are grouped into atomic batches.

``Producer(lake, "ns.topic", linger_ms=5, batch_bytes=8 MiB)`` collects the records of every ``send`` (from any
number of threads) into the open batch. One background thread commits batches one at a time (Kafka's
``max.in.flight.requests.per.connection=1``, so a producer's records keep their send order in each
partition): a batch closes when its first record has waited ``linger_ms``, when it holds ``batch_bytes`` of
records, or on ``flush``/``close``; records sent while a commit is under way gather in the next batch. Each
commit is one atomic batch (docs/guarantees.md#the-raw-log); a send's future resolves to ``RecordMetadata(partition,
offset)`` once its batch committed, or fails with the batch's error: a failed commit fails exactly the futures
of its batch, and the next batch is unaffected.

Every batch gets a fresh batch id. A retryable failure (a lost race past the attempt bound, an outage, an
unknown outcome) is retried up to ``retries`` times **with the same id**, so a batch that did commit before an
ambiguous failure is found in the batch-id record and not appended twice (Kafka's idempotent producer).

Bad records (a partition out of range, an oversized record, a timestamp out of range) are refused by ``send``
itself with ``InvalidRecordError``, so one bad record never fails the other records of its batch.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from compactor.clock import resolve_now_ms
from compactor.errors import CompactorError, InputError, InvalidRecordError
from compactor.lake import Lake
from compactor.producing.arrow_input import HEADERS_TYPE, INPUT_SCHEMA, RowNumbers
from compactor.producing.produced import RecordMetadata
from compactor.producing.producer import produce_stream
from compactor.topics.record_rules import HEADER_KEY_NOT_TEXT, record_problem, record_size
from compactor.topics.topic import Topic

log = logging.getLogger(__name__)
HeaderInput = Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]


def _bytes(value: bytes | str | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InputError(f"{what} must be bytes, str or None, got {type(value).__name__}")


class _Batch:
    """The records of one batch in send order, and their futures."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.partitions: list[int | None] = []
        self.timestamps: list[int | None] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.futures: list[Future[RecordMetadata]] = []
        self.bytes = 0
        self.opened = time.monotonic()
        self.batch_id = uuid.uuid4().hex

    def __len__(self) -> int:
        return len(self.futures)

    def arrow(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.large_binary()), pa.array(self.values, pa.large_binary()),
            pa.array(self.partitions, pa.int64()), pa.array(self.timestamps, pa.int64()),
            pa.array(self.headers, HEADERS_TYPE), pa.nulls(len(self), pa.int64()),
        ], schema=INPUT_SCHEMA)


class Producer:
    """A buffered, thread-safe producer for one topic (see the module docstring)."""

    def __init__(self, lake: Lake, topic: str | Topic, *, linger_ms: int = 5,
                 batch_bytes: int = 8 * 1024 * 1024, retries: int = 5, max_attempts: int = 60,
                 clock: Callable[[], int] | None = None) -> None:
        if linger_ms < 0 or batch_bytes < 1 or retries < 0:
            raise InputError("linger_ms must be >= 0, batch_bytes >= 1 and retries >= 0")
        self.topic = topic if isinstance(topic, Topic) else lake.topic(topic)
        settings = self.topic.settings
        self.partitions = self.topic.partitions
        self.max_message_bytes = settings.max_message_bytes
        self.linger_s = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self.retries = retries
        self.max_attempts = max_attempts
        self._clock = clock or (lambda: resolve_now_ms(None))
        self._lock = threading.Condition()
        self._open = _Batch()
        self._in_flight: _Batch | None = None
        self._flush_requested = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"producer-{self.topic.name}", daemon=True)
        self._thread.start()

    # --- sending --------------------------------------------------------------------------------------

    def send(self, value: bytes | str | None = None, key: bytes | str | None = None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers: HeaderInput | None = None) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to its ``RecordMetadata`` when its batch commits."""
        key_bytes, value_bytes = _bytes(key, "key"), _bytes(value, "value")
        pairs = None
        size = record_size(key_bytes, value_bytes)
        if headers:
            items = headers.items() if isinstance(headers, Mapping) else headers
            named: list[tuple[str, bytes | None]] = []
            for name, header_value in items:
                if not isinstance(name, str):
                    raise InvalidRecordError(HEADER_KEY_NOT_TEXT)
                named.append((name, _bytes(header_value, "a header value")))
            pairs = [{"key": name, "value": encoded} for name, encoded in named]
            size = record_size(key_bytes, value_bytes, named)
        problem = record_problem(partition, size, timestamp_ms, self.partitions, self.max_message_bytes)
        if problem is not None:
            raise InvalidRecordError(problem)
        future: Future[RecordMetadata] = Future()
        with self._lock:
            if self._closed:
                raise InputError("the producer is closed")
            batch = self._open
            if not batch.futures:
                batch.opened = time.monotonic()
            batch.keys.append(key_bytes)
            batch.values.append(value_bytes)
            batch.partitions.append(partition)
            batch.timestamps.append(timestamp_ms)
            batch.headers.append(pairs)
            batch.futures.append(future)
            batch.bytes += size
            if batch.bytes >= self.batch_bytes or len(batch) == 1:
                self._lock.notify_all()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until each of those records committed or failed."""
        with self._lock:
            pending = [f for b in (self._in_flight, self._open) if b is not None for f in b.futures]
            self._flush_requested += 1
            self._lock.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for future in pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                future.exception(timeout=remaining)
            except TimeoutError:
                raise TimeoutError(f"flush did not finish within {timeout} s") from None

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the producer; later sends are refused."""
        with self._lock:
            if self._closed:
                return
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the sender thread ---------------------------------------------------------------------------------

    def _next_batch(self) -> _Batch | None:
        """Wait until the open batch is due (or the producer closed), then take it."""
        with self._lock:
            while True:
                batch = self._open
                if batch.futures:
                    due = (self._flush_requested or self._closed or batch.bytes >= self.batch_bytes
                           or time.monotonic() - batch.opened >= self.linger_s)
                    if due:
                        self._open = _Batch()
                        self._in_flight = batch
                        self._flush_requested = 0
                        return batch
                    self._lock.wait(max(0.0, self.linger_s - (time.monotonic() - batch.opened)))
                    continue
                self._flush_requested = 0
                if self._closed:
                    return None
                self._lock.wait()

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._commit(batch)
            finally:
                with self._lock:
                    self._in_flight = None

    def _commit(self, batch: _Batch) -> None:
        arrow = batch.arrow()
        error: BaseException | None = None
        for attempt in range(self.retries + 1):
            try:
                outcome = produce_stream(self.topic, [(arrow, RowNumbers(unit="send"))], batch_id=batch.batch_id,
                                         now_ms=self._clock(), fresh_id=attempt == 0, max_attempts=self.max_attempts,
                                         operation="produce-buffered")
            except CompactorError as exc:
                error = exc
                if not exc.retryable or attempt == self.retries:
                    break
                log.warning("batch %s of %s failed (%s); retrying with the same batch id", batch.batch_id,
                            self.topic.name, exc)
                self._refresh_quietly()
                continue
            except BaseException as exc:  # unexpected: fail the batch's futures, keep the producer alive
                error = exc
                break
            position = 0
            for partitions, offsets in outcome.resolve():
                for p, o in zip(partitions.tolist(), offsets.tolist(), strict=True):
                    batch.futures[position].set_result(RecordMetadata(p, o))
                    position += 1
            outcome.close()
            return
        assert error is not None
        for future in batch.futures:
            future.set_exception(error)

    def _refresh_quietly(self) -> None:
        try:
            self.topic.refresh()
        except Exception:  # the next attempt reports the outage if it persists
            log.debug("could not re-read %s", self.topic.name, exc_info=True)


__all__ = ["Producer", "RecordMetadata"]
