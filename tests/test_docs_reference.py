"""docs/configuration.md is complete: every topic setting with its default, every environment variable the
product reads, and every flag of the ``compactor`` command line are on it (so the reference cannot fall behind
the code)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from compactor.cli.main import build_parser
from compactor.topics.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(?P<name>[a-z.\-]+)` \| (?P<default>[^|]+) \|", re.MULTILINE)
VARIABLE = re.compile(r"\b(?:COMPACTOR|AWS)_[A-Z0-9_]+\b")


def test_every_topic_setting_is_listed_with_its_default() -> None:
    rows = {m.group("name"): m.group("default").strip().strip("`") for m in ROW.finditer(REFERENCE.read_text())}
    expected = {spec.name: spec.default or "(none)" for spec in SETTINGS}
    assert {name: rows.get(name) for name in expected} == expected


def test_every_environment_variable_the_code_reads_is_listed() -> None:
    sources = [*ROOT.glob("compactor/**/*.py"), *ROOT.glob("readers/**/*.py"), *ROOT.glob("infra/**/*.sh")]
    used = {name for path in sources for name in VARIABLE.findall(path.read_text())}
    assert "COMPACTOR_WAREHOUSE" in used
    assert sorted(used - set(VARIABLE.findall(REFERENCE.read_text()))) == []


def _flags(parser: argparse.ArgumentParser, verb: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _flags(sub, f"{verb} {name}".strip())
        elif action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
            found += [(verb, option) for option in action.option_strings]
    return found


def test_every_command_line_flag_is_listed() -> None:
    text = REFERENCE.read_text()
    flags = _flags(build_parser(), "")
    assert ("produce", "--batch-records") in flags
    assert [(verb, flag) for verb, flag in flags if f"`{flag}" not in text] == []
