"""Every code block of README.md and of docs/'s pages runs as written, or says visibly why it cannot
(``<!-- not run: ... -->``, naming the test that covers it); the README and the docs link only to what exists.

Shell blocks run in a temporary directory with the project's virtual environment there (``.venv``, as the
walk-through expects) and on PATH, ``COMPACTOR_WAREHOUSE`` inside it, and ``BOOTSTRAP`` naming the run's one Kafka
broker (the mirroring page's walk-through starts a broker only when none is named); Python blocks then run against the
lake those blocks made. One runner process runs the blocks of every page (tests/readme_blocks.py), so the Python
blocks that start Spark share one JVM; the walk-through's ``compactor compact`` starts the other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import jvm_env
from tests.readme_blocks import COVERING_TEST, Block, blocks_of, extract, nav_pages, pages
from tests.servers import KafkaBroker

ROOT = Path(__file__).resolve().parents[2]
SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR) ", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_blocks_and_markers_are_found() -> None:
    text = "\n".join([
        "intro", "```bash", "echo one", "```", "",
        "<!-- not run: needs a Docker engine -->", "```bash", "docker compose up", "```",
        "```python", "print(2)", "```", "```json", "{}", "```"])
    blocks = extract(text, "docs/x.md")
    assert [(b.line, b.language, b.not_run) for b in blocks] == [
        (2, "bash", None), (7, "bash", "needs a Docker engine"), (10, "python", None), (13, "json", None)]
    assert blocks[0].code == "echo one\n" and not blocks[3].runnable
    assert blocks[1].describe() == "docs/x.md:7 (bash): docker compose up"
    with pytest.raises(ValueError, match="never closed"):
        extract("```bash\necho")


def test_the_pages_are_the_readme_then_every_docs_page_in_nav_order() -> None:
    in_nav = nav_pages()
    assert sorted(p.name for p in in_nav) == sorted(p.name for p in (ROOT / "docs").glob("*.md")), (
        "every docs/*.md page is in mkdocs.yml's nav, and every nav entry is a page")
    run = pages()
    assert run[0] == ROOT / "README.md" and len(run) > 5
    assert (ROOT / "docs" / "benchmarks.md") in in_nav and (ROOT / "docs" / "benchmarks.md") not in run


def test_every_block_can_run_or_says_why_not_and_what_covers_it() -> None:
    blocks = blocks_of(pages())
    assert blocks, "the pages have code blocks"
    unrunnable = [b.describe() for b in blocks if b.not_run is None and not b.runnable]
    assert not unrunnable, f"blocks in a language with no runner must be marked <!-- not run: why -->: {unrunnable}"
    uncovered = [b.describe() for b in blocks if b.not_run is not None and b.runnable
                 and not COVERING_TEST.search(b.not_run)]
    assert not uncovered, f"a shell or Python block not run must name the test that covers it: {uncovered}"
    missing = [f"{b.describe()}: {name}" for b in blocks if b.not_run is not None
               for name in COVERING_TEST.findall(b.not_run) if not (ROOT / name).is_file()]
    assert not missing, f"not-run markers name tests that do not exist: {missing}"


def test_the_readme_links_only_to_files_that_exist() -> None:
    """mkdocs build --strict checks the links between docs/'s pages; the README is not part of the site."""
    targets = [m.group("target").split("#")[0] for m in LINK.finditer((ROOT / "README.md").read_text())]
    local = [t for t in targets if t and "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    assert [t for t in local if not (ROOT / t).exists()] == []


def _environment(workdir: Path, bootstrap: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK", "SPARK_", "PYICEBERG_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["COMPACTOR_WAREHOUSE"] = str(workdir / "warehouse")
    env["PYICEBERG_HOME"] = str(workdir / "pyiceberg-home")
    env["BOOTSTRAP"] = bootstrap  # the run's one broker: the mirroring page's walk-through starts none of its own
    env.update(COMPACTOR_DRIVER_MEMORY="768m", COMPACTOR_SPARK_CORES="1", COMPACTOR_SHUFFLE_PARTITIONS="2",
               **jvm_env())  # the tests' JVM options: speed only, no output or behaviour of their own
    return env


@pytest.mark.spark
@pytest.mark.slow  # ~50 s (two JVMs and the run's broker); the routes its blocks take are each in the loop through
# their own tests
@pytest.mark.long
def test_every_block_runs_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     kafka_broker: KafkaBroker) -> None:
    paths = pages()
    blocks = blocks_of(paths)
    skipped = [b for b in blocks if b.not_run is not None]
    with capsys.disabled():  # list what was not run, and why, on every run
        print(f"\n{len(paths)} pages: {len(blocks) - len(skipped)} blocks run, {len(skipped)} not run:")
        for block in skipped:
            print(f"  not run: {block.describe()}: {block.not_run}")
    workdir = tmp_path / "readme"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(ROOT / ".venv")  # `source .venv/bin/activate`, as after set-up
    (workdir / "infra").symlink_to(ROOT / "infra")  # the project's scripts, as in a checkout
    report = tmp_path / "outcomes.json"
    env = _environment(workdir, kafka_broker.bootstrap)
    result = subprocess.run([sys.executable, "-m", "tests.readme_blocks", str(workdir), str(report),
                             *map(str, paths)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=1800, check=False)
    assert result.returncode == 0, result.stderr[-5000:]
    outcomes = json.loads(report.read_text())
    by_place = {(b.page, b.line): b for b in blocks}
    run: list[Block] = [b for b in blocks if b.not_run is None]
    assert [(o["page"], o["line"]) for o in outcomes] == [(b.page, b.line) for b in run]
    failed = [f"{by_place[o['page'], o['line']].describe()}\n{o['output'][-4000:]}" for o in outcomes if not o["ok"]]
    with capsys.disabled():  # where the test's time goes
        slowest = sorted(outcomes, key=lambda o: -o["seconds"])[:5]
        print("slowest blocks: " + ", ".join(f"{o['page']}:{o['line']} {o['seconds']:.1f}s" for o in slowest))
    assert not failed, ("blocks that failed (fix them, or mark them <!-- not run: why, and the test that covers "
                        "it -->):\n" + "\n\n".join(failed))
    # a default run shows no Spark logging (the walk-through's `compactor compact` starts Spark)
    for outcome in outcomes:
        if by_place[outcome["page"], outcome["line"]].language != "python":
            assert not SPARK_LOG_LINE.search(outcome["output"]), outcome["output"][-4000:]
