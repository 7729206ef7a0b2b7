"""Every code block in README.md runs as written, or says visibly why it cannot (``<!-- not run: ... -->``).

Shell blocks run in a temporary directory with the project's virtual environment there (``.venv``, as the
walk-through expects) and on PATH, and ``COMPACTOR_WAREHOUSE`` inside it; Python blocks then run against the
lake those blocks made. One runner process runs them all (tests/readme_blocks.py), so the Python blocks that
start Spark share one JVM; the walk-through's ``compactor compact`` starts the other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme_blocks import Block, extract

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR) ", re.MULTILINE)


def test_blocks_and_markers_are_found() -> None:
    text = "\n".join([
        "intro", "```bash", "echo one", "```", "",
        "<!-- not run: needs a Docker engine -->", "```bash", "docker compose up", "```",
        "```python", "print(2)", "```", "```json", "{}", "```"])
    blocks = extract(text)
    assert [(b.line, b.language, b.not_run) for b in blocks] == [
        (2, "bash", None), (7, "bash", "needs a Docker engine"), (10, "python", None), (13, "json", None)]
    assert blocks[0].code == "echo one\n" and not blocks[3].runnable
    with pytest.raises(ValueError, match="never closed"):
        extract("```bash\necho")


def test_every_readme_block_can_run_or_says_why_not() -> None:
    blocks = extract(README.read_text())
    assert blocks, "README.md has code blocks"
    unrunnable = [b.describe() for b in blocks if b.not_run is None and not b.runnable]
    assert not unrunnable, f"blocks in a language with no runner must be marked <!-- not run: why -->: {unrunnable}"


def _environment(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK", "SPARK_", "PYICEBERG_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["COMPACTOR_WAREHOUSE"] = str(workdir / "warehouse")
    env["PYICEBERG_HOME"] = str(workdir / "pyiceberg-home")
    env.update(COMPACTOR_DRIVER_MEMORY="768m", COMPACTOR_SPARK_CORES="1", COMPACTOR_SHUFFLE_PARTITIONS="2")
    return env


@pytest.mark.spark
def test_readme_blocks_run_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = extract(README.read_text())
    skipped = [b for b in blocks if b.not_run is not None]
    with capsys.disabled():  # list what was not run, and why, on every run
        print(f"\nREADME.md: {len(blocks) - len(skipped)} blocks run, {len(skipped)} not run:")
        for block in skipped:
            print(f"  not run: {block.describe()}: {block.not_run}")
    workdir = tmp_path / "readme"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(ROOT / ".venv")  # `source .venv/bin/activate`, as after set-up
    report = tmp_path / "outcomes.json"
    result = subprocess.run([sys.executable, "-m", "tests.readme_blocks", str(README), str(workdir), str(report)],
                            cwd=ROOT, env=_environment(workdir), capture_output=True, text=True, timeout=1800,
                            check=False)
    assert result.returncode == 0, result.stderr[-5000:]
    outcomes = json.loads(report.read_text())
    by_line = {b.line: b for b in blocks}
    run: list[Block] = [b for b in blocks if b.not_run is None]
    assert [o["line"] for o in outcomes] == [b.line for b in run]
    failed = [f"{by_line[o['line']].describe()}\n{o['output'][-4000:]}" for o in outcomes if not o["ok"]]
    assert not failed, "README blocks that failed (fix them, or mark them <!-- not run: why -->):\n" + (
        "\n\n".join(failed))
    # a default run shows no Spark logging (the walk-through's `compactor compact` starts Spark)
    for outcome in outcomes:
        if by_line[outcome["line"]].language != "python":
            assert not SPARK_LOG_LINE.search(outcome["output"]), outcome["output"][-4000:]
