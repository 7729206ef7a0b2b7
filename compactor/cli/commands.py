"""Handlers of the ``compactor`` verbs: each turns arguments into an API call and prints its result."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from compactor.cli.main import UsageError
from compactor.errors import InputError
from compactor.lake import Lake
from compactor.topics.settings import parse_assignments


def lake_of(args: argparse.Namespace) -> Lake:
    return Lake(warehouse=args.warehouse, catalog_uri=args.catalog_uri)


def emit(obj: Any) -> None:
    """Print one JSON document on standard output."""
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _assignments(pairs: list[str]) -> dict[str, str]:
    try:
        return parse_assignments(pairs)
    except InputError as exc:
        raise UsageError(str(exc)) from None


# --- topic -----------------------------------------------------------------------------------------


def topic_create(args: argparse.Namespace) -> int:
    lake = lake_of(args)
    topic = lake.create_topic(args.name, partitions=args.partitions, config=_assignments(args.config))
    emit({"topic": str(topic.name), "created": True, "partitions": topic.partitions,
          "settings": topic.settings.as_kafka_dict()})
    return 0


def topic_config(args: argparse.Namespace) -> int:
    topic = lake_of(args).topic(args.name)
    updates = _assignments(args.set)
    if updates or args.unset:
        topic.set_config(updates, args.unset)
    from compactor.topics.settings import SETTINGS

    props = topic.properties
    emit({
        "topic": str(topic.name),
        "settings": topic.settings.as_kafka_dict(),
        "overridden": sorted(s.name for s in SETTINGS if s.stored_as in props),
    })
    return 0


def topic_list(args: argparse.Namespace) -> int:
    names = lake_of(args).list_topics()
    if args.json:
        emit(names)
    else:
        for name in names:
            print(name)
    return 0


def topic_describe(args: argparse.Namespace) -> int:
    info = lake_of(args).topic(args.name).describe()
    if args.json:
        emit(info)
        return 0
    print(f"topic {info['topic']}  ({info['partitions']} partition(s), location {info['location']})")
    print(f"  records {info['records']}  bytes {info['bytes']}  files {info['files']}  "
          f"snapshots {info['snapshots']}")
    for p, entry in info["by_partition"].items():
        print(f"  partition {p}: offsets [{info['log_start_offsets'][p]}, {info['next_offsets'][p]})  "
              f"records {entry['records']}  bytes {entry['bytes']}  files {entry['files']}")
    print("  settings:")
    for key, value in info["settings"].items():
        print(f"    {key} = {value}")
    cursor = info["compaction_cursor"]
    print(f"  compaction cursor: {json.dumps(cursor) if cursor else 'none'}")
    print(f"  erasure bound: {info['erasure_bound']['text']}")
    print("  schema:")
    for line in str(info["schema"]).splitlines():
        print(f"    {line}")
    return 0


def topic_delete(args: argparse.Namespace) -> int:
    emit(lake_of(args).delete_topic(args.name))
    return 0


# --- produce -----------------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> int:
    from compactor.topics.producer import produce as produce_batch
    from compactor.topics.records import parse_lines

    lake = lake_of(args)
    topic = lake.topic(args.name)  # unknown topic is reported before reading the input
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
    lines = [n for n, _ in parsed]
    records = [r for _, r in parsed]
    result = produce_batch(topic, records, batch_id=args.batch_id, now_ms=args.now_ms, line_numbers=lines)
    out = sys.stdout
    for partition, offset in result.offsets:
        out.write(f'{{"partition": {partition}, "offset": {offset}}}\n')
    out.flush()
    return 0


# --- read ----------------------------------------------------------------------------------------------


def read(args: argparse.Namespace) -> int:
    from compactor.topics.records import write_jsonl
    from readers.positions import merge_starts, parse_pairs
    from readers.reader import TopicReader

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


# Verbs added by later modules register here (compact, retention, status, clean).
EXTRA_VERBS: list[Callable[[Any], None]] = []


# --- compact -----------------------------------------------------------------------------------------------


def compact(args: argparse.Namespace) -> int:
    from compactor.compaction.job import TwoPhaseCompactor

    result = TwoPhaseCompactor(lake_of(args), args.name, now_ms=args.now_ms, if_due=args.if_due).run()
    emit(result.as_json())
    return 0


def _register_compact(verbs: Any) -> None:
    parser = verbs.add_parser("compact", help="run the two-phase compaction (a Spark job) and print its result")
    parser.add_argument("name")
    parser.add_argument("--now-ms", type=int, help="override the clock (milliseconds since the epoch)")
    parser.add_argument("--if-due", action="store_true", help="skip (committed: false) unless the topic is due")
    parser.set_defaults(handler=compact)


EXTRA_VERBS.append(_register_compact)


# --- retention ---------------------------------------------------------------------------------------------


def retention(args: argparse.Namespace) -> int:
    from compactor.retention import run_retention

    result = run_retention(lake_of(args), args.name, now_ms=args.now_ms, dry_run=args.dry_run)
    emit(result.as_json())
    return 0


def _register_retention(verbs: Any) -> None:
    parser = verbs.add_parser("retention", help="apply the topic's cleanup.policy and expire snapshots")
    parser.add_argument("name")
    parser.add_argument("--now-ms", type=int, help="override the clock (milliseconds since the epoch)")
    parser.add_argument("--dry-run", action="store_true", help="report what would be removed; change nothing")
    parser.set_defaults(handler=retention)


EXTRA_VERBS.append(_register_retention)


# --- status and the cleaner ----------------------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    from compactor.status import render_text, topic_status

    result = topic_status(lake_of(args), args.name, now_ms=args.now_ms)
    if args.json:
        emit(result)
    else:
        print(render_text(result))
    return 0


def _register_status(verbs: Any) -> None:
    parser = verbs.add_parser("status", help="cursor, offsets, dirty ratio, lag and whether compaction is due")
    parser.add_argument("name")
    parser.add_argument("--json", action="store_true", help="print JSON (the interface's fields)")
    parser.add_argument("--now-ms", type=int, help="override the clock (milliseconds since the epoch)")
    parser.set_defaults(handler=status)


def clean(args: argparse.Namespace) -> int:
    from compactor.cleaner import Cleaner, PassResult, stop_on_signals

    cleaner = Cleaner(lake_of(args), backoff_s=args.backoff)
    failed: list[str] = []

    def report(result: PassResult) -> None:
        failed.extend(result.failed)
        print(json.dumps(result.as_json(), default=str, separators=(",", ":")), flush=True)

    with stop_on_signals(cleaner):
        if args.interval is not None:
            if args.interval <= 0:
                raise UsageError("--interval must be a positive number of seconds")
            cleaner.run_forever(args.interval, report, now_ms=args.now_ms)
            return 0
        report(cleaner.run_once(args.now_ms))
    return 1 if failed else 0


def _register_clean(verbs: Any) -> None:
    parser = verbs.add_parser(
        "clean", help="the cleaner: compact due topics filthiest first, then apply retention to every topic",
        description="Without --interval, one pass (--once): exits 1 if any topic failed. With --interval, "
                    "passes until SIGTERM/SIGINT (finishing the current step), exit 0.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass over every topic (the default)")
    mode.add_argument("--interval", type=float, metavar="S", help="a pass every S seconds until stopped")
    parser.add_argument("--backoff", type=float, default=300.0, metavar="S",
                        help="skip a failed topic for S seconds (default 300)")
    parser.add_argument("--now-ms", type=int, help="override the clock (milliseconds since the epoch)")
    parser.set_defaults(handler=clean)


EXTRA_VERBS.extend([_register_status, _register_clean])
