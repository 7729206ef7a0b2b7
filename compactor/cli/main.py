"""The ``compactor`` command line (docs/reference.md): parsing, dispatch, and exit statuses.

Exit status: 0 success; 2 usage error; 75 outcome unknown; 1 (with one line on standard error naming the
problem) for every other failure. Only ``compact``, ``retention`` and ``clean`` start Spark; ``topic``,
``produce``, ``status``, ``read`` and ``consume`` (of topics and attached logs) run on pyiceberg alone.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from compactor.cli import attach_verbs, consuming, maintenance, mirroring, produce_read, topic_verbs
from compactor.errors import CompactorError, UsageError
from compactor.iceberg.catalog import first_line
from compactor.progress import LOG_LEVELS, parse_log_level

# Every verb registers itself the same way: a module with ``register(subparsers)`` whose parsers set ``handler``.
VERB_MODULES = (topic_verbs, produce_read, maintenance, consuming, mirroring)


class CommandParser(argparse.ArgumentParser):
    """A parser that keeps the options and the verbs added to it, so that the global options can be accepted
    after the verb too (``read T --warehouse W``): every parser that ends a command (``read``, ``topic create``,
    ...) takes them, not shown again in its help, and given there they win."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: list[argparse.Action] = []
        self.verbs: dict[str, CommandParser] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.options.append(action)
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        actions = super().add_subparsers(**kwargs)
        self.verbs = actions.choices  # filled by add_parser: each a CommandParser (argparse's parser_class)
        return actions

    def accept_after_verbs(self, options: list[argparse.Action]) -> None:
        """Add ``options`` (suppressed) to every parser below this one that ends a command."""
        for verb in dict.fromkeys(self.verbs.values()):  # a verb with aliases once
            if verb.verbs:
                verb.accept_after_verbs(options)
                continue
            for option in options:
                verb.add_argument(*option.option_strings, dest=option.dest, type=option.type, metavar=option.metavar,
                                  help=argparse.SUPPRESS, default=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="compactor",
        description="Pulsar-style, non-destructive two-phase topic compaction on Apache Iceberg.",
    )
    parser.add_argument("--warehouse", help="local directory or s3://bucket/prefix "
                        "(env COMPACTOR_WAREHOUSE, default ./warehouse; on a REST catalog, optional: where the "
                        "product puts its tables, else the catalog chooses)")
    parser.add_argument("--catalog-uri", help="SQLite file or postgresql://... catalog database, or an Iceberg REST "
                        "catalog's http(s)://... URI (env COMPACTOR_CATALOG_URI; default for a local warehouse: a "
                        "SQLite file inside it). A REST catalog's warehouse name and credentials come from the "
                        "environment or files only: COMPACTOR_REST_WAREHOUSE, COMPACTOR_REST_CREDENTIAL, "
                        "COMPACTOR_REST_TOKEN, COMPACTOR_REST_PROPERTIES_FILE")
    parser.add_argument("--group-store", metavar="URI",
                        help="where consumer groups live (env COMPACTOR_GROUP_STORE): sqlite:///path, "
                        "postgresql://user@host/db, s3://bucket/prefix or a directory. Default: the catalog's "
                        "database (a SQL catalog), else <warehouse>/_groups")
    parser.add_argument("--log-level", type=_log_level_argument, metavar="LEVEL",
                        help=f"{', '.join(LOG_LEVELS)} (any case; env COMPACTOR_LOG_LEVEL): the level of progress "
                        "lines and of Spark's own logging, all on standard error. Default: info for progress, "
                        "warning for Spark with its start-up messages (loopback hostname, native Hadoop "
                        "library) left out; a level given here shows them")
    global_options = [option for option in parser.options if option.dest != "help"]
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERB_MODULES:
        module.register(verbs)
    parser.accept_after_verbs(global_options)
    return parser


def _log_level_argument(text: str) -> str:
    try:
        return parse_log_level(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resolve_log_level(parser: argparse.ArgumentParser, given: str | None) -> str | None:
    """``--log-level``, else ``COMPACTOR_LOG_LEVEL``, else ``None`` (the default run). A level given on the
    command line is exported as ``COMPACTOR_LOG_LEVEL``: that is where the Spark session (and the
    spark-submit command ``compactor.deploy`` builds) read the level of Spark's own logging."""
    if given is not None:
        os.environ["COMPACTOR_LOG_LEVEL"] = given
        return given
    from_env = os.environ.get("COMPACTOR_LOG_LEVEL")
    if not from_env:
        return None
    try:
        return parse_log_level(from_env)
    except UsageError as exc:
        parser.error(f"COMPACTOR_LOG_LEVEL: {exc}")


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
    """Progress and summaries of the ``compactor`` loggers (at ``level``, one of ``LOG_LEVELS``) go to standard
    error (not to the root logger, which an embedding application or test runner may own)."""
    logger = logging.getLogger("compactor")
    for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
        logger.removeHandler(handler)
    handler = _CliHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, parse_log_level(level).upper()))
    logger.propagate = False
    for noisy in ("py4j", "pyiceberg", "urllib3", "botocore", "s3fs", "aiobotocore", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(resolve_log_level(parser, args.log_level) or "info")
    try:
        code = attach_verbs.route(args)(args)
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
        print(f"compactor: error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    return int(code or 0)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep what the process frees for reuse, for a short-lived command: no trimming of the
    heap below 256 MB, and blocks up to 64 MB from the heap rather than from fresh mappings. numpy's temporaries
    (half a megabyte per 65,536-row chunk) were otherwise given back and faulted in again chunk after chunk: a
    fresh 1M-record ``produce --format parquet`` took 62,700 page faults and 0.346 s, and 47,300 and 0.328 s with
    this (medians of 10 interleaved runs, 2026-11-24); ``compactor --help`` 0.73 -> 0.68 s, JSON Lines 590k ->
    650k records/s, its peak RSS 263 -> 275-282 MiB for 1M records. Returns whether it applied (not on other C
    libraries)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, 256 << 20)) and bool(mallopt(_M_MMAP_THRESHOLD, 64 << 20))


def run(argv: Sequence[str] | None = None) -> int:
    """The process entry point (the ``compactor`` script, ``python -m compactor.cli.main``): ``main``, with the
    objects alive at start and at the end moved out of the garbage collector's reach (``gc.freeze``).

    The command line imports some 140,000 objects (pyiceberg, pyarrow, SQLAlchemy, pydantic). Without this, the
    interpreter's shutdown walks them in its final collections, a quarter of a second on every command
    (measured: ``compactor --help`` 1.0 s, 0.78 s frozen; a 1M-record ``produce`` 0.3 s less). Objects
    still alive at exit are reclaimed with the process; nothing this code relies on is finalised by the
    collector (files and catalog connections are closed explicitly; ``atexit`` handlers still run). In-process
    callers (tests, notebooks) call ``main`` and keep their collector as it was. The C library's allocator
    keeps freed memory too (``keep_freed_memory``)."""
    keep_freed_memory()
    gc.freeze()  # imports are done: later young-generation collections need not walk them either
    try:
        return main(argv)
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(run())
