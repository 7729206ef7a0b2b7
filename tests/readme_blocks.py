"""The code blocks of the README and of every page of docs/, extracted and run as written (tests/e2e/test_readme.py).

A block is a fenced code block at the start of a line. A block that cannot run here carries a visible marker on
the line before its fence, ``<!-- not run: REASON -->``; a marked shell or Python block names, in REASON, the test
that covers it (``tests/....py``). Every other block must run: shell blocks (``bash``, ``sh``, ``shell``) each in
a fresh ``bash -e -o pipefail``, Python blocks each in a fresh namespace, all in reading order (the README, then
the pages in the order of ``mkdocs.yml``'s nav), in one working directory (so the walk-through's lake is what
later blocks and pages read). A block in any other language has no runner and must be marked.

A nav page that is a link to a file outside docs/ (``benchmarks.md`` is ``bench/README.md``) belongs to that
file: its blocks are the benchmarks' own commands, and are not run here.

Run as ``python -m tests.readme_blocks WORKDIR REPORT PAGE...``: runs every block of the pages, writes one JSON
outcome per block to REPORT. Python blocks share that one interpreter (so one JVM serves every block of every
page that starts Spark) but never each other's variables: each block must define what it uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

SHELL = ("bash", "sh", "shell")
PYTHON = ("python", "py")
FENCE = re.compile(r"^```([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
COVERING_TEST = re.compile(r"\btests/[\w/]+\.py\b")
BLOCK_TIMEOUT_S = 600
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, where it starts, its language and code, and why it is not run (if marked)."""

    line: int
    language: str
    code: str
    not_run: str | None = None
    page: str = "README.md"

    @property
    def runnable(self) -> bool:
        return self.language in SHELL + PYTHON

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def describe(self) -> str:
        first = next((line for line in self.code.splitlines() if line.strip()), "")
        return f"{self.where} ({self.language or 'no language'}): {first[:70]}"


@dataclass(frozen=True)
class Outcome:
    page: str
    line: int
    ok: bool
    output: str
    seconds: float = 0.0


def extract(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of ``text``, with the ``not run`` reason of a marker on the line before its fence."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: code block never closed")
        previous = lines[i - 1] if i > 0 else ""
        marker = MARKER.match(previous)
        blocks.append(Block(line=i + 1, language=fence.group(1).lower(), code="\n".join(lines[i + 1:end]) + "\n",
                            not_run=marker.group("reason") if marker else None, page=page))
        i = end + 1
    return blocks


def _nav_files(nav: Any) -> list[str]:
    """The page files of an MkDocs nav, in order (entries are ``file``, ``{title: file}`` or nested lists)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def nav_pages(root: Path = ROOT) -> list[Path]:
    """docs/'s pages in the order of ``mkdocs.yml``'s nav, with those that are links to files outside docs/."""
    config = yaml.safe_load((root / "mkdocs.yml").read_text())
    return [root / "docs" / name for name in _nav_files(config["nav"])]


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose blocks run, in reading order: README.md, then docs/'s own pages in nav order."""
    docs = (root / "docs").resolve()
    own = [p for p in nav_pages(root) if p.resolve().is_relative_to(docs)]
    return [root / "README.md", *own]


def blocks_of(paths: list[Path], root: Path = ROOT) -> list[Block]:
    """Every block of ``paths``, in order, each named by its page relative to ``root``."""
    return [b for path in paths for b in extract(path.read_text(), str(path.relative_to(root)))]


def run_shell(block: Block, workdir: Path) -> Outcome:
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=workdir, capture_output=True,
                            text=True, timeout=BLOCK_TIMEOUT_S, check=False)
    output = f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    return Outcome(block.page, block.line, result.returncode == 0, output)


def run_python(block: Block) -> Outcome:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.where, "exec"), {"__name__": "__readme__"})
    except BaseException:
        return Outcome(block.page, block.line, False, out.getvalue() + traceback.format_exc())
    return Outcome(block.page, block.line, True, out.getvalue())


def run_all(blocks: list[Block], workdir: Path) -> list[Outcome]:
    """Run the blocks to run, in order, from ``workdir``."""
    os.chdir(workdir)
    outcomes = []
    for block in blocks:
        if block.not_run is not None or not block.runnable:
            continue
        started = time.monotonic()
        outcome = run_shell(block, workdir) if block.language in SHELL else run_python(block)
        outcomes.append(dataclasses.replace(outcome, seconds=round(time.monotonic() - started, 2)))
    return outcomes


def main(argv: list[str]) -> int:
    workdir, report, *paths = (Path(a).resolve() for a in argv)
    outcomes = run_all(blocks_of(paths), workdir)
    report.write_text(json.dumps([asdict(o) for o in outcomes]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
