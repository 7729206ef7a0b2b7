"""``compactor produce`` and ``compactor read``: records in and out as JSON Lines (no Spark)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from compactor.cli.common import add_now_ms, lake_of
from compactor.errors import InputError, UsageError
from compactor.topics.producer import produce as produce_batch
from compactor.topics.records import parse_lines, write_jsonl
from readers.positions import merge_starts, parse_pairs
from readers.reader import TopicReader


def produce(args: argparse.Namespace) -> int:
    topic = lake_of(args).topic(args.name)  # an unknown topic is reported before the input is read
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as handle:
                parsed = list(parse_lines(handle))
        except OSError as exc:
            raise InputError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{args.file} is not UTF-8 text: {exc}") from None
    else:
        parsed = list(parse_lines(sys.stdin))
    result = produce_batch(topic, [r for _, r in parsed], batch_id=args.batch_id, now_ms=args.now_ms,
                           line_numbers=[n for n, _ in parsed])
    out = sys.stdout
    for partition, offset in result.offsets:
        out.write(f'{{"partition": {partition}, "offset": {offset}}}\n')
    out.flush()
    return 0


def read(args: argparse.Namespace) -> int:
    try:
        starts = merge_starts(parse_pairs(args.from_offset, "offset", "--from-offset"),
                              parse_pairs(args.from_timestamp, "timestamp", "--from-timestamp"))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    reader = TopicReader(lake_of(args), args.name, read_compacted=args.compacted, start=starts,
                         reset=args.reset, as_of_cursor=args.as_of_cursor, now_ms=args.now_ms)
    write_jsonl(reader.records(), sys.stdout)
    sys.stdout.flush()
    return 0


def register(verbs: Any) -> None:
    producing = verbs.add_parser("produce", help="append JSON Lines records as one atomic batch")
    producing.add_argument("name")
    producing.add_argument("--file", help="JSON Lines input (default: standard input)")
    producing.add_argument("--batch-id", help="idempotence key: re-sending a committed batch appends nothing")
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
