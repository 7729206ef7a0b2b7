"""The README's code blocks, extracted and run as written (tests/e2e/test_readme.py).

A block is a fenced code block at the start of a line. A block that cannot run here carries a visible marker on
the line before its fence, ``<!-- not run: REASON -->``; every other block must run: shell blocks (``bash``,
``sh``, ``shell``) each in a fresh ``bash -e -o pipefail``, Python blocks each in a fresh namespace, all in
document order, in one working directory (so the walk-through's lake is what later blocks read). A block in any
other language has no runner and must be marked.

Run as ``python -m tests.readme_blocks README WORKDIR REPORT``: runs every block, writes one JSON outcome per
block to REPORT. Python blocks share that one interpreter (so one JVM serves every block that starts Spark) but
never each other's variables: each block must define what it uses.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

SHELL = ("bash", "sh", "shell")
PYTHON = ("python", "py")
FENCE = re.compile(r"^```([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
BLOCK_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts, its language and code, and why it is not run (if marked)."""

    line: int
    language: str
    code: str
    not_run: str | None = None

    @property
    def runnable(self) -> bool:
        return self.language in SHELL + PYTHON

    def describe(self) -> str:
        first = next((line for line in self.code.splitlines() if line.strip()), "")
        return f"README.md:{self.line} ({self.language or 'no language'}): {first[:70]}"


@dataclass(frozen=True)
class Outcome:
    line: int
    ok: bool
    output: str


def extract(text: str) -> list[Block]:
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
            raise ValueError(f"README.md:{i + 1}: code block never closed")
        previous = lines[i - 1] if i > 0 else ""
        marker = MARKER.match(previous)
        blocks.append(Block(line=i + 1, language=fence.group(1).lower(), code="\n".join(lines[i + 1:end]) + "\n",
                            not_run=marker.group("reason") if marker else None))
        i = end + 1
    return blocks


def run_shell(block: Block, workdir: Path) -> Outcome:
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=workdir, capture_output=True,
                            text=True, timeout=BLOCK_TIMEOUT_S, check=False)
    output = f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    return Outcome(block.line, result.returncode == 0, output)


def run_python(block: Block) -> Outcome:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, f"README.md:{block.line}", "exec"), {"__name__": "__readme__"})
    except BaseException:
        return Outcome(block.line, False, out.getvalue() + traceback.format_exc())
    return Outcome(block.line, True, out.getvalue())


def run_all(blocks: list[Block], workdir: Path) -> list[Outcome]:
    """Run the blocks to run, in order, from ``workdir``."""
    os.chdir(workdir)
    outcomes = []
    for block in blocks:
        if block.not_run is not None or not block.runnable:
            continue
        outcomes.append(run_shell(block, workdir) if block.language in SHELL else run_python(block))
    return outcomes


def main(argv: list[str]) -> int:
    readme, workdir, report = (Path(a) for a in argv)
    outcomes = run_all(extract(readme.read_text()), workdir)
    report.write_text(json.dumps([asdict(o) for o in outcomes]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
