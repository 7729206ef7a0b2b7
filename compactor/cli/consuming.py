"""``compactor consume`` and ``compactor group ...``: consume for a group, and see or move its positions.

``consume`` prints records as JSON Lines (exactly ``read``'s format), flushes, and only then commits the
positions after them: at-least-once (a crash between the two prints those records again next time). Without
``--follow`` it exits 0 after ``--max-records`` records or after ``--timeout-ms`` with nothing new; with
``--follow`` it runs until SIGTERM or SIGINT, then commits what it printed and leaves the group at once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

from compactor.cli.common import add_json_action, add_now_ms, emit, lake_of
from compactor.consumer import Consumer
from compactor.consumer.admin import describe_group, reset_group
from compactor.errors import FencedInstanceIdError, NotOwnerError, UsageError
from compactor.groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupStore,
)
from compactor.topics.records import Record, write_jsonl
from readers.batches import batch_to_records

if TYPE_CHECKING:
    from compactor.lake import Lake

FOLLOW_POLL_MS = 1000
log = logging.getLogger("compactor.consume")


def consume(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records < 1:
        raise UsageError("--max-records must be at least 1")
    consumer = Consumer(lake_of(args), args.name, group=args.group, read_compacted=args.compacted,
                        auto_offset_reset=args.reset, session_timeout_ms=args.session_timeout_ms,
                        heartbeat_interval_ms=max(1, min(DEFAULT_HEARTBEAT_INTERVAL_MS, args.session_timeout_ms // 3)),
                        max_poll_interval_ms=args.max_poll_interval_ms, group_instance_id=args.group_instance_id)
    write = _writer(lake_of(args), args.name)
    stop = [False]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop[0] = True
        consumer.wakeup()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if args.follow else {}
    printed = 0
    try:
        while not stop[0]:
            limit = None if args.max_records is None else args.max_records - printed
            batches = consumer.poll_batches(FOLLOW_POLL_MS if args.follow else args.timeout_ms, limit)
            for batch in batches:
                printed += write(batch_to_records(batch))
            sys.stdout.flush()  # the records are out before their positions are committed
            if batches:
                _commit(consumer, args.follow)
            if args.max_records is not None and printed >= args.max_records:
                break
            if not batches and not args.follow:
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        consumer.close()
    return 0


def _writer(lake: Lake, name: str) -> Callable[[Iterable[Record]], int]:
    """How ``consume`` prints records: ``read``'s format (an attached log's: key and value as JSON objects)."""
    from compactor.attach.registry import load_attached

    if load_attached(lake.catalog, name) is None:
        return lambda records: write_jsonl(records, sys.stdout)
    from readers.attached import write_record_objects

    return lambda records: write_record_objects(records, sys.stdout)


def _commit(consumer: Consumer, follow: bool) -> None:
    """Commit what was printed. Following, a refused commit (the member lost a partition: its lease lapsed, a
    forced reset) is logged and the member goes on with what it owns: the partition's new owner prints those
    records again (at-least-once); without ``--follow`` it is the command's error."""
    try:
        consumer.commit()
    except NotOwnerError as exc:
        if not follow or isinstance(exc, FencedInstanceIdError):
            raise
        log.warning("consume: %s", exc)


def group_list(args: argparse.Namespace) -> int:
    groups = GroupStore(lake_of(args)).list_groups()
    if args.json:
        emit([g.as_json() for g in groups])
    else:
        for g in groups:
            print(f"{g.group}\t{','.join(g.topics)}")
    return 0


def group_describe(args: argparse.Namespace) -> int:
    described = describe_group(lake_of(args), args.group, args.now_ms)
    if args.json:
        emit(described)
        return 0
    print(f"group {described.group}  total lag {described.total_lag}")
    for p in described.partitions:
        print(f"  {p.topic}:{p.partition}  committed {p.committed_offset}  end {p.log_end_offset}  lag {p.lag} "
              f"({p.lag_ms} ms)  owner {p.owner or '-'}  compacted-range {'yes' if p.in_compacted_range else 'no'}"
              f"  last reset {p.last_reset or '-'}")
    for m in described.members:
        print(f"  member {m['member_id']} ({m['client']})  partitions {','.join(m['partitions'])}  lease until "
              f"{m['lease_expires_ms']}")
    return 0


def group_reset(args: argparse.Namespace) -> int:
    emit(reset_group(lake_of(args), args.group, args.topic, args.to, force=args.force))
    return 0


def group_delete(args: argparse.Namespace) -> int:
    GroupStore(lake_of(args)).delete(args.group)  # refused while members are live, as Kafka refuses
    emit({"group": args.group, "deleted": True})
    return 0


def register(verbs: Any) -> None:
    consuming = verbs.add_parser("consume", help="consume for a group from its committed positions (JSON Lines)")
    consuming.add_argument("name")
    consuming.add_argument("--group", required=True)
    mode = consuming.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compacted", action="store_true", help="Pulsar's readCompacted: the view, then raw")
    mode.add_argument("--raw", action="store_true", help="the raw log")
    consuming.add_argument("--max-records", type=int, metavar="N", help="exit after N records")
    consuming.add_argument("--timeout-ms", type=int, default=1000, metavar="MS",
                           help="without --follow: exit after MS milliseconds with nothing new (default 1000)")
    consuming.add_argument("--follow", action="store_true", help="keep following until SIGTERM or SIGINT")
    consuming.add_argument("--reset", choices=["earliest", "latest", "error"], default="earliest",
                           help="where to start with no committed position, or out of range (default earliest)")
    consuming.add_argument("--session-timeout-ms", type=int, default=DEFAULT_SESSION_TIMEOUT_MS, metavar="MS",
                           help="the member's lease: a member killed without closing loses its partitions after "
                           f"this long (Kafka's session.timeout.ms, default {DEFAULT_SESSION_TIMEOUT_MS})")
    consuming.add_argument("--max-poll-interval-ms", type=int, default=DEFAULT_MAX_POLL_INTERVAL_MS, metavar="MS",
                           help="a member that does not poll for this long leaves the group (Kafka's "
                           f"max.poll.interval.ms, default {DEFAULT_MAX_POLL_INTERVAL_MS})")
    consuming.add_argument("--group-instance-id", metavar="ID",
                           help="static membership (Kafka's group.instance.id): a restart within "
                           "--session-timeout-ms keeps the member's partitions; a second live process with the "
                           "same ID fences the first")
    consuming.set_defaults(handler=consume)

    group = verbs.add_parser("group", help="consumer groups: list, describe, reset, delete")
    actions = group.add_subparsers(dest="group_verb", metavar="ACTION", required=True)
    add_json_action(actions, "list", "the groups with committed positions", group_list)
    describing = add_json_action(actions, "describe", "positions, lag, owners and members of a group", group_describe,
                                 "group")
    add_now_ms(describing, hidden=True)
    resetting = actions.add_parser("reset", help="move a group's committed positions on a topic")
    resetting.add_argument("group")
    resetting.add_argument("--topic", required=True)
    resetting.add_argument("--to", nargs="+", required=True, metavar="WHERE",
                           help="earliest | latest | offset P:O | timestamp P:T")
    resetting.add_argument("--force", action="store_true",
                           help="even while members hold leases: fences them (their commits are refused, and "
                           "they resume at the reset position)")
    resetting.set_defaults(handler=group_reset)
    deleting = actions.add_parser("delete", help="remove a group and its positions")
    deleting.add_argument("group")
    deleting.set_defaults(handler=group_delete)
