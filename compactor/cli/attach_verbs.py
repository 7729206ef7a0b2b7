"""``compactor topic attach|detach``, and the verbs that act on an attached log (``compact``, ``read``,
``status``, ``retention``, ``topic describe``, ``topic delete``), routed here when NAME is one; ``produce``
refuses an attached log (the product never writes to its source)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compactor.attach.mapping import LAYOUTS
from compactor.cli.common import assignments, emit, lake_of
from compactor.errors import InputError, NotATopicError, UsageError

if TYPE_CHECKING:
    from compactor.attach.registry import AttachedLog


def topic_attach(args: argparse.Namespace) -> int:
    from compactor.attach.api import attach_table

    keys = [k for k in (args.key_columns or "").split(",") if k.strip()]
    attached = attach_table(lake_of(args), args.name, table=args.table, layout=args.layout,
                            partition_column=args.partition_column, offset_column=args.offset_column,
                            timestamp_column=args.timestamp_column, key_columns=keys,
                            tombstone_when=args.tombstone_when, config=assignments(args.config))
    emit({"topic": str(attached.name), "attached": True, "source": attached.mapping.source,
          "mapping": json.loads(attached.mapping.to_json()), "settings": attached.settings.as_kafka_dict()})
    return 0


def topic_detach(args: argparse.Namespace) -> int:
    from compactor.attach.api import detach_table

    emit(detach_table(lake_of(args), args.name))
    return 0


def _compact(args: argparse.Namespace) -> int:
    from compactor.attach.compaction import compact_attached

    emit(compact_attached(lake_of(args), args.name, now_ms=args.now_ms))
    return 0


def _read(args: argparse.Namespace) -> int:
    """``read`` of an attached log: the readers' records (no JVM), printed with ``key`` and ``value`` as the JSON
    objects of the key and value columns; on Spark when the tombstone rule is a Spark SQL condition the readers
    cannot evaluate (``attach.condition``)."""
    from compactor.attach.condition import readers_can_evaluate
    from compactor.attach.mapping import NULL_VALUE
    from compactor.cli.produce_read import reader_of
    from readers.attached import write_record_objects

    attached: AttachedLog = args.attached  # loaded by route
    rule = attached.mapping.tombstone
    if rule != NULL_VALUE and not readers_can_evaluate(rule):
        return _read_on_spark(args, rule)
    write_record_objects(reader_of(args).records(), sys.stdout)
    sys.stdout.flush()
    return 0


def _read_on_spark(args: argparse.Namespace, rule: str) -> int:
    from compactor.attach.reading import read_attached
    from readers.positions import parse_pairs

    unsupported = [flag for flag, given in (("--from-timestamp", args.from_timestamp), ("--as-of-cursor",
                   args.as_of_cursor is not None), ("--reset", args.reset is not None)) if given]
    if unsupported:
        raise UsageError(f"{', '.join(unsupported)}: not with the tombstone rule {rule!r} of {args.name}, which only "
                         "Spark evaluates (the readers take the forms docs/attaching.md lists)")
    try:
        starts = parse_pairs(args.from_offset, "offset", "--from-offset")
    except InputError as exc:
        raise UsageError(str(exc)) from None
    offsets = {p: int(start.value or 0) for p, start in starts.items()}
    for record in read_attached(lake_of(args), args.name, read_compacted=args.compacted, from_offsets=offsets):
        sys.stdout.write(json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


def _status(args: argparse.Namespace) -> int:
    from compactor.attach.status import attached_status

    attached: AttachedLog = args.attached  # loaded by route
    emit(attached_status(attached, args.now_ms))
    return 0


def _describe(args: argparse.Namespace) -> int:
    from compactor.attach.status import describe_attached

    attached: AttachedLog = args.attached  # loaded by route
    emit(describe_attached(attached))
    return 0


def _retention(args: argparse.Namespace) -> int:
    from compactor.attach.status import attached_retention

    attached: AttachedLog = args.attached  # loaded by route
    emit(attached_retention(attached, lake_of(args).config, now_ms=args.now_ms, dry_run=args.dry_run))
    return 0


def _refuse_write(args: argparse.Namespace) -> int:
    raise NotATopicError(f"'{args.name}' is an attached log: the product never writes to its source table; "
                         "produce to the system that writes the source")


def _refuse_config(args: argparse.Namespace) -> int:
    if args.set or args.unset:
        raise InputError(f"'{args.name}' is an attached log: its settings are given at 'topic attach --config'")
    return _describe(args)


ROUTES: dict[tuple[str, str | None], Callable[[argparse.Namespace], int]] = {
    ("compact", None): _compact, ("read", None): _read, ("status", None): _status, ("retention", None): _retention,
    ("topic", "describe"): _describe, ("topic", "delete"): topic_detach, ("topic", "config"): _refuse_config,
    ("produce", None): _refuse_write,
}


def route(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The handler for ``args``: the attached-log one when the verb acts on a NAME that is an attached log."""
    handler: Callable[[argparse.Namespace], int] = args.handler
    key = (args.verb, getattr(args, "topic_verb", None))
    if key not in ROUTES or not isinstance(getattr(args, "name", None), str):
        return handler
    from compactor.attach.registry import load_attached
    from compactor.errors import CompactorError

    try:
        attached = load_attached(lake_of(args).catalog, args.name)
    except (CompactorError, ValueError):
        return handler  # the verb's own handler reports the problem (unknown topic, no lake, bad name)
    if attached is None:
        return handler
    args.attached = attached  # the attached handlers use it rather than load it again
    return ROUTES[key]


def register_topic_actions(actions: Any) -> None:
    attach = actions.add_parser("attach", help="make an existing append-only Iceberg table a topic's raw log, "
                                "never writing to it")
    attach.add_argument("name", help="the attached log's name (namespace.topic): its compacted view's table")
    attach.add_argument("--table", required=True, metavar="NS.TABLE", help="the source table")
    attach.add_argument("--layout", required=True, choices=LAYOUTS,
                        help="kafka-connect: the sink's _kafka_metadata columns; redpanda: the redpanda struct; "
                        "columns: the columns named below")
    attach.add_argument("--partition-column", metavar="C")
    attach.add_argument("--offset-column", metavar="C")
    attach.add_argument("--timestamp-column", metavar="C")
    attach.add_argument("--key-columns", metavar="C1[,C2...]", help="the key (several: a composite key); "
                        "nested fields as a.b")
    attach.add_argument("--tombstone-when", metavar="null-value|EXPR",
                        help="null-value (default: every value column null) or a SQL condition on the row, such "
                        "as \"_cdc.op = 'D'\" (comparisons with literals, IN, IS NULL, LIKE 'p%', AND, OR, NOT)")
    attach.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic setting (default cleanup.policy=compact)")
    attach.set_defaults(handler=topic_attach)
    detach = actions.add_parser("detach", help="drop an attached log's view and mapping; the source stays as it was")
    detach.add_argument("name")
    detach.set_defaults(handler=topic_detach)
