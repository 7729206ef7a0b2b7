"""The repository stands alone: no file points at notes a user does not have (the team's contract and interface
files, a directory beside the repository), and the user docs say what those notes said (docs/guarantees.md,
docs/reference.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"SEMANTICS\.md|INTERFACE\.md|SEMANTICS section|\.\./shared|shared notes")
BENCH_IMPORT = re.compile(r"^\s*(from bench[. ]|import bench\b)", re.MULTILINE)


def tracked_text_files() -> list[str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [n for n in names if n.endswith((".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".txt", ".cfg"))
            and (ROOT / n).is_file() and not (ROOT / n).is_symlink()]


def references_outside(text: str) -> list[str]:
    return [f"line {i}: {line.strip()[:100]}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_no_file_points_at_notes_outside_the_repository() -> None:
    found = {name: hits for name in tracked_text_files() if Path(__file__).name not in name
             and (hits := references_outside((ROOT / name).read_text(encoding="utf-8", errors="replace")))}
    assert found == {}


def test_the_tests_do_not_import_the_benchmarks() -> None:
    """What both need (a command's peak memory, Spark's event log per stage) lives in ``tests/measure.py``;
    ``bench/`` imports it from there, never the other way round."""
    found = [name for name in tracked_text_files() if name.startswith("tests/") and name.endswith(".py")
             and BENCH_IMPORT.search((ROOT / name).read_text(encoding="utf-8"))]
    assert found == []


def test_a_reference_outside_is_found() -> None:
    assert references_outside("ok\nsee SEMANTICS section 4\n../shared/INTERFACE.md\n") == [
        "line 2: see SEMANTICS section 4", "line 3: ../shared/INTERFACE.md"]


def test_the_user_pages_hold_the_guarantees_and_the_interface() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "guarantees.md" in nav and "reference.md" in nav
    guarantees = (ROOT / "docs" / "guarantees.md").read_text()
    for heading in ("The raw log", "Compaction", "The cursor and failures", "Retention", "Readers",
                    "Bad input and credentials", "Consumers and groups", "Mirrors"):
        assert f"\n## {heading}\n" in guarantees, heading
    reference = (ROOT / "docs" / "reference.md").read_text()
    for heading in ("The command line", "Record JSON", "JSON results", "The Python API", "Errors"):
        assert f"\n## {heading}\n" in reference, heading
    from compactor import errors
    public = [name for name in vars(errors) if name.endswith("Error") and isinstance(getattr(errors, name), type)]
    assert [name for name in public if f"`{name}`" not in reference] == []  # every error class is documented


def _anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives the headings of ``page``."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if line.startswith("#")}


def test_every_pointer_into_the_docs_names_a_section_that_exists() -> None:
    pointer = re.compile(r"docs/(guarantees|reference)\.md#([\w-]+)")
    anchors = {page: _anchors(ROOT / "docs" / f"{page}.md") for page in ("guarantees", "reference")}
    assert {"the-raw-log", "the-cursor-and-failures", "consumers-and-groups"} <= anchors["guarantees"]
    cited = {(name, m.group(1), m.group(2)) for name in tracked_text_files() if name.endswith(".py")
             for m in pointer.finditer((ROOT / name).read_text(encoding="utf-8"))}
    assert len(cited) > 40
    assert [c for c in cited if c[2] not in anchors[c[1]]] == []
