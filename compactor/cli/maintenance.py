"""``compactor compact``, ``retention``, ``status`` and ``clean``: the maintenance verbs.

``compact`` and ``clean`` start Spark (and ``retention`` when a ``delete,compact`` trim is due); ``status``
reads metadata only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from compactor.cleaner import Cleaner, PassResult, stop_on_signals
from compactor.cli.common import add_now_ms, emit, lake_of
from compactor.errors import UsageError
from compactor.retention import run_retention
from compactor.status import render_text, topic_status


def compact(args: argparse.Namespace) -> int:
    from compactor.compaction.job import TwoPhaseCompactor  # imports pyspark: only the verbs that run Spark do

    emit(TwoPhaseCompactor(lake_of(args), args.name, now_ms=args.now_ms, if_due=args.if_due,
                           force_rewrite=args.rewrite, layout=args.layout).run())
    return 0


def retention(args: argparse.Namespace) -> int:
    emit(run_retention(lake_of(args), args.name, now_ms=args.now_ms, dry_run=args.dry_run))
    return 0


def status(args: argparse.Namespace) -> int:
    result = topic_status(lake_of(args), args.name, now_ms=args.now_ms)
    if args.json:
        emit(result)
    else:
        print(render_text(result))
    return 0


def clean(args: argparse.Namespace) -> int:
    if args.interval is not None and args.interval <= 0:
        raise UsageError("--interval must be a positive number of seconds")
    cleaner = Cleaner(lake_of(args), backoff_s=args.backoff)
    failed: list[str] = []

    def report(result: PassResult) -> None:
        failed.extend(result.failed)
        print(json.dumps(result.as_json(), default=str, separators=(",", ":")), flush=True)

    with stop_on_signals(cleaner):
        if args.interval is not None:
            cleaner.run_forever(args.interval, report, now_ms=args.now_ms)
            return 0
        report(cleaner.run_once(args.now_ms))
    return 1 if failed else 0


def register(verbs: Any) -> None:
    compacting = verbs.add_parser("compact", help="run the two-phase compaction (a Spark job) and print its result")
    compacting.add_argument("name")
    add_now_ms(compacting)
    compacting.add_argument("--if-due", action="store_true", help="skip (committed: false) unless the topic is due")
    compacting.add_argument("--rewrite", action="store_true",
                            help="rewrite the whole compacted view (folds its delete files in) if the run has work")
    compacting.add_argument("--layout", choices=("partitioned", "sliced"),
                            help="force the Spark layout of the run (default: chosen by estimated cost)")
    compacting.set_defaults(handler=compact)

    retaining = verbs.add_parser("retention", help="apply the topic's cleanup.policy and expire snapshots")
    retaining.add_argument("name")
    add_now_ms(retaining)
    retaining.add_argument("--dry-run", action="store_true", help="report what would be removed; change nothing")
    retaining.set_defaults(handler=retention)

    showing = verbs.add_parser("status", help="cursor, offsets, dirty ratio, lag and whether compaction is due")
    showing.add_argument("name")
    showing.add_argument("--json", action="store_true", help="print JSON (the interface's fields)")
    add_now_ms(showing)
    showing.set_defaults(handler=status)

    cleaning = verbs.add_parser(
        "clean", help="the cleaner: compact due topics filthiest first, then apply retention to every topic",
        description="Without --interval, one pass (--once): exits 1 if any topic failed. With --interval, "
                    "passes until SIGTERM/SIGINT (finishing the current step), exit 0.")
    mode = cleaning.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass over every topic (the default)")
    mode.add_argument("--interval", type=float, metavar="S", help="a pass every S seconds until stopped")
    cleaning.add_argument("--backoff", type=float, default=300.0, metavar="S",
                          help="skip a failed topic for S seconds (default 300)")
    add_now_ms(cleaning)
    cleaning.set_defaults(handler=clean)
