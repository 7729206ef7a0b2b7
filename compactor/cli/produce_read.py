"""``compactor produce`` and ``compactor read``: records in and out (no Spark).

``produce`` streams its input (JSON Lines, Parquet or Arrow IPC) in bounded chunks into the data files of one
atomic batch and commits once (docs/guarantees.md#the-raw-log: one produce is one atomic batch), so memory is bounded by
a chunk, not by the file. ``--batch-records N`` instead commits every N records as its own atomic batch, with
batch ids ``ID.0``, ``ID.1``, ... derived from ``--batch-id``: re-running the same command after a failure then
skips the batches that committed and appends the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.cli.common import add_now_ms, lake_of
from compactor.errors import InputError, UsageError
from compactor.lake import Lake
from compactor.producing.placements import Placements
from compactor.producing.produced import BatchSummary, ProduceResult
from compactor.producing.producer import produce_stream
from compactor.producing.sources import FORMATS, read_source, split
from compactor.progress import Progress
from compactor.topics.records import write_jsonl
from compactor.topics.topic import Topic
from readers.positions import merge_starts, parse_pairs
from readers.reader import TopicReader

log = logging.getLogger("compactor.produce")


def produce(args: argparse.Namespace) -> int:
    """Stream the input into one atomic batch (or one per ``--batch-records`` rows) and print where each
    record landed (JSON Lines input) or one summary per batch (columnar input, or ``--output summary``)."""
    lake = lake_of(args)
    topic = lake.topic(args.name)  # an unknown topic is reported before the input is read
    if args.engine == "spark":
        return _produce_with_spark(args, lake, topic)
    if args.batch_records is not None and args.batch_records < 1:
        raise UsageError("--batch-records must be at least 1")
    output = args.output or ("records" if args.format == "jsonl" else "summary")
    source = args.file or "standard input"
    progress = Progress("produce", str(topic.name))
    try:
        with contextlib.ExitStack() as stack:
            stream: BinaryIO | None = None
            if args.format != "parquet":
                stream = stack.enter_context(open(args.file, "rb")) if args.file else _stdin()
            chunks = read_source(args.format, stream, args.file, source)
            groups = split(chunks, args.batch_records) if args.batch_records else iter([chunks])
            for number, group in enumerate(groups):
                batch_id = args.batch_id
                if batch_id is not None and args.batch_records:
                    batch_id = f"{batch_id}.{number}"
                outcome = produce_stream(topic, group, batch_id=batch_id, now_ms=args.now_ms,
                                         keep_offsets=args.keep_offsets,
                                         placements=Placements(spool=True, keep_ranks=args.keep_offsets),
                                         on_chunk=_reporter(progress))
                try:
                    _print(outcome, output)
                finally:
                    outcome.close()  # its spool file, whichever output was printed
                _note_replay(outcome.summary)
                if outcome.records >= PROGRESS_RECORDS:
                    progress.phase("committed", records=outcome.records, batch_id=batch_id,
                                   duplicate=outcome.duplicate)
    except OSError as exc:
        raise InputError(f"cannot read {source}: {exc.strerror or exc}") from None
    return 0


def _produce_with_spark(args: argparse.Namespace, lake: Lake, topic: Topic) -> int:
    """``--engine spark``: Spark reads the Parquet input (a file or a directory of files) and its executors
    write the batch (``produce_dataframe``: one atomic batch, offsets in the files' row order); prints the
    batch's summary. Under ``spark-submit`` the input must be readable by every executor."""
    if args.format != "parquet" or not args.file:
        raise UsageError("--engine spark reads Parquet: give --format parquet --file PATH (a file or directory)")
    if args.keep_offsets or args.batch_records is not None or args.output == "records":
        raise UsageError("--engine spark takes neither --keep-offsets, --batch-records nor --output records")
    from compactor.producing.dataframe import produce_dataframe

    path = args.file if "://" in args.file else Path(args.file).resolve().as_uri()  # executors' own cwd differs
    frame = lake.spark().read.parquet(path)
    summary = produce_dataframe(lake, topic, frame, batch_id=args.batch_id, now_ms=args.now_ms)
    if summary.records or summary.duplicate:
        sys.stdout.write(json.dumps(summary.as_json()) + "\n")
    sys.stdout.flush()
    _note_replay(summary)
    return 0


def _note_replay(summary: BatchSummary) -> None:
    """Say on standard error that a batch was a replay: its output is the original batch's, nothing appended."""
    if summary.duplicate:
        log.warning("batch id %r was already committed (snapshot %s): nothing was appended; the offsets printed are "
                    "those of the original batch", summary.batch_id, summary.snapshot_id)


def _stdin() -> BinaryIO:
    """Standard input as bytes (an embedding program may have replaced it by a text stream)."""
    binary = getattr(sys.stdin, "buffer", None)
    if binary is not None:
        return cast(BinaryIO, binary)
    return io.BytesIO(sys.stdin.read().encode("utf-8"))


PROGRESS_RECORDS = 100_000
PROGRESS_EVERY_S = 2.0


def _reporter(progress: Progress) -> Callable[[int], None]:
    """Progress on standard error for large inputs: at most one line every ``PROGRESS_EVERY_S`` seconds."""
    last = [time.monotonic()]

    def report(rows: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            progress.phase("staging", "records written to the batch's data files", records=rows)

    return report


def _print(outcome: ProduceResult, output: str) -> None:
    out = sys.stdout
    if output == "summary":
        if outcome.snapshot_id is not None:
            out.write(json.dumps(outcome.summary.as_json()) + "\n")
        out.flush()
        return
    out.flush()
    binary = sys.stdout.buffer
    for partitions, offsets in outcome.resolve():
        binary.write(placement_lines(partitions, offsets))
    binary.flush()


def placement_lines(partitions: Any, offsets: Any) -> memoryview:
    """``{"partition": P, "offset": O}`` lines for arrays of partitions and offsets, built by Arrow."""
    text = pc.binary_join_element_wise('{"partition": ', pa.array(partitions).cast(pa.string()), ', "offset": ',
                                       pa.array(offsets).cast(pa.string()), "}\n", "")
    if len(text) == 0:
        return memoryview(b"")
    value_offsets = np.frombuffer(text.buffers()[1], np.int32)[text.offset: text.offset + len(text) + 1]
    return memoryview(text.buffers()[2])[int(value_offsets[0]): int(value_offsets[-1])]


def reader_of(args: argparse.Namespace) -> TopicReader:
    """The reader ``read``'s arguments ask for (a topic's or an attached log's)."""
    try:
        starts = merge_starts(parse_pairs(args.from_offset, "offset", "--from-offset"),
                              parse_pairs(args.from_timestamp, "timestamp", "--from-timestamp"))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    return TopicReader(lake_of(args), args.name, read_compacted=args.compacted, start=starts,
                       reset=args.reset, as_of_cursor=args.as_of_cursor, now_ms=args.now_ms)


def read(args: argparse.Namespace) -> int:
    reader = reader_of(args)
    write_jsonl(reader.records(), sys.stdout)
    sys.stdout.flush()
    return 0


def register(verbs: Any) -> None:
    producing = verbs.add_parser("produce", help="append records (JSON Lines, Parquet or Arrow) as one atomic batch")
    producing.add_argument("name")
    producing.add_argument("--file", help="input file (default: standard input; Parquet needs a file)")
    producing.add_argument("--format", choices=FORMATS, default="jsonl",
                           help="JSON Lines (default), or Parquet / Arrow IPC with the record columns")
    producing.add_argument("--batch-id", help="idempotence key: re-sending a committed batch appends nothing "
                           "(within producer.id.expiration.ms)")
    producing.add_argument("--keep-offsets", action="store_true",
                           help="keep the offsets the input carries: per partition they continue N_p densely "
                           "(with gaps allowed on a mirrored topic)")
    producing.add_argument("--batch-records", type=int, metavar="N",
                           help="commit every N records as its own atomic batch (batch ids ID.0, ID.1, ...)")
    producing.add_argument("--engine", choices=["python", "spark"], default="python",
                           help="python (default): this process writes the batch; spark: Spark's executors read "
                           "the Parquet input and write it (produce_dataframe), one atomic batch")
    producing.add_argument("--output", choices=["records", "summary"],
                           help="print partition/offset per record (jsonl default) or one summary per batch")
    add_now_ms(producing)
    producing.set_defaults(handler=produce)

    reading = verbs.add_parser("read", help="print records as JSON Lines in partition, offset order")
    reading.add_argument("name")
    mode = reading.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compacted", action="store_true", help="compacted view, then the raw tail")
    mode.add_argument("--raw", action="store_true", help="the raw log")
    reading.add_argument("--from-offset", action="append", default=[], metavar="P:O")
    reading.add_argument("--from-timestamp", action="append", default=[], metavar="P:T")
    reading.add_argument("--reset", choices=["earliest", "latest"],
                         help="where to start when an offset is out of range")
    reading.add_argument("--as-of-cursor", type=int, metavar="ID", help="read as of a retained cursor")
    reading.add_argument("--format", choices=["jsonl"], default="jsonl")
    add_now_ms(reading, hidden=True)
    reading.set_defaults(handler=read)
