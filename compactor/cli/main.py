"""The ``compactor`` command line (INTERFACE.md): parsing, dispatch, and exit statuses.

Exit status: 0 success; 2 usage error; 75 outcome unknown; 1 (with one line on standard error naming the
problem) for every other failure. Only ``compact``, ``retention`` and ``clean`` start Spark; ``topic``,
``produce``, ``read`` and ``status`` run on pyiceberg alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from compactor.errors import CompactorError

EXIT_USAGE = 2
EXIT_OUTCOME_UNKNOWN = 75


class UsageError(CompactorError):
    """Arguments that are well-formed for argparse but not for the verb (exit status 2)."""

    exit_code = EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    from compactor.cli import commands as c

    parser = argparse.ArgumentParser(
        prog="compactor",
        description="Pulsar-style, non-destructive two-phase topic compaction on Apache Iceberg.",
    )
    parser.add_argument("--warehouse", help="local directory or s3://bucket/prefix "
                        "(env COMPACTOR_WAREHOUSE, default ./warehouse)")
    parser.add_argument("--catalog-uri", help="SQLite file or postgresql://... catalog database "
                        "(env COMPACTOR_CATALOG_URI; default for a local warehouse: a SQLite file inside it)")
    parser.add_argument("--log-level", default=os.environ.get("COMPACTOR_LOG_LEVEL", "INFO"),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="progress and summary logging on stderr")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    topic = verbs.add_parser("topic", help="create, configure, list, describe or delete topics")
    topic_verbs = topic.add_subparsers(dest="topic_verb", metavar="ACTION", required=True)
    create = topic_verbs.add_parser("create", help="create a topic (NAME is namespace.topic)")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, help="partition count, fixed at create (default 1)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic setting")
    create.set_defaults(handler=c.topic_create)
    config = topic_verbs.add_parser("config", help="show or change a topic's settings")
    config.add_argument("name")
    config.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    config.add_argument("--unset", action="append", default=[], metavar="KEY", help="restore the default")
    config.set_defaults(handler=c.topic_config)
    listing = topic_verbs.add_parser("list", help="list topics")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=c.topic_list)
    describe = topic_verbs.add_parser("describe", help="schema, settings, sizes, offsets, erasure bound")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(handler=c.topic_describe)
    delete = topic_verbs.add_parser("delete", help="drop a topic with all its data")
    delete.add_argument("name")
    delete.set_defaults(handler=c.topic_delete)

    produce = verbs.add_parser("produce", help="append JSON Lines records as one atomic batch")
    produce.add_argument("name")
    produce.add_argument("--file", help="JSON Lines input (default: standard input)")
    produce.add_argument("--batch-id", help="idempotence key: re-sending a committed batch appends nothing")
    produce.add_argument("--now-ms", type=int, help="override the clock (milliseconds since the epoch)")
    produce.set_defaults(handler=c.produce)

    read = verbs.add_parser("read", help="print records as JSON Lines in partition, offset order")
    read.add_argument("name")
    mode = read.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compacted", action="store_true", help="compacted view, then the raw tail")
    mode.add_argument("--raw", action="store_true", help="the raw log")
    read.add_argument("--from-offset", action="append", default=[], metavar="P:O")
    read.add_argument("--from-timestamp", action="append", default=[], metavar="P:T")
    read.add_argument("--reset", choices=["earliest", "latest"], help="where to start when an offset is out of range")
    read.add_argument("--as-of-cursor", type=int, metavar="ID", help="read as of a retained cursor")
    read.add_argument("--format", choices=["jsonl"], default="jsonl")
    read.add_argument("--now-ms", type=int, help=argparse.SUPPRESS)
    read.set_defaults(handler=c.read)

    for extra in c.EXTRA_VERBS:
        extra(verbs)
    return parser


class _CliHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the moment of each record (like logging's last-resort handler).

    Also marks the handler the command line installed, so a second ``main()`` call replaces it. Binding the
    stream at install time would leave a handler writing to a closed file once an embedding program (or a
    test runner capturing output) swaps ``sys.stderr`` back after ``main()`` returns.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # set by StreamHandler.__init__; the live sys.stderr is used instead
        pass


def configure_logging(level: str) -> None:
    """Progress and summaries of the ``compactor`` loggers go to standard error (not to the root logger, which
    an embedding application or test runner may own)."""
    logger = logging.getLogger("compactor")
    for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
        logger.removeHandler(handler)
    handler = _CliHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, level))
    logger.propagate = False
    for noisy in ("py4j", "pyiceberg", "urllib3", "botocore", "s3fs", "aiobotocore", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        code = args.handler(args)
    except CompactorError as exc:
        print(f"compactor: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compactor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (e.g. `| head`): not an error worth reporting
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # an unexpected failure still gets one line naming it
        logging.getLogger("compactor").debug("unexpected failure", exc_info=True)
        from compactor.catalog import first_line

        print(f"compactor: error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
