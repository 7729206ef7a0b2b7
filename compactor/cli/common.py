"""What every verb handler shares: opening the lake from the global options, and printing the result."""

from __future__ import annotations

import argparse
import json
from typing import Any

from compactor.errors import InputError, UsageError
from compactor.lake import Lake
from compactor.results import JsonResult
from compactor.topics.settings import parse_assignments


def lake_of(args: argparse.Namespace) -> Lake:
    """The lake named by ``--warehouse`` / ``--catalog-uri`` / ``--group-store`` (or their environment
    variables)."""
    return Lake(warehouse=args.warehouse, catalog_uri=args.catalog_uri, group_store=getattr(args, "group_store", None))


def emit(result: JsonResult | dict[str, Any] | list[Any]) -> None:
    """Print one JSON document on standard output: the verb's result, and nothing else goes there."""
    obj = result.as_json() if isinstance(result, JsonResult) else result
    print(json.dumps(obj, indent=2, sort_keys=False, default=str), flush=True)


def assignments(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments; a malformed one is a usage error."""
    try:
        return parse_assignments(pairs)
    except InputError as exc:
        raise UsageError(str(exc)) from None


def add_now_ms(parser: argparse.ArgumentParser, *, hidden: bool = False) -> None:
    parser.add_argument("--now-ms", type=int, help=argparse.SUPPRESS if hidden else
                        "override the clock (milliseconds since the epoch)")


def add_json_action(actions: Any, name: str, help_text: str, handler: Any,
                    *positionals: str) -> argparse.ArgumentParser:
    """An action that prints a table or, with ``--json``, JSON (``list``, ``describe``): its parser, taking
    ``positionals`` and ``--json``, run by ``handler``."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
    for positional in positionals:
        parser.add_argument(positional)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=handler)
    return parser
