"""The import graph: the layers of pyproject.toml hold (import-linter), and no module imports itself through
others (no cycle), counting imports inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_layers_contract_is_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that reach each other (a cycle when larger than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_import_graph_has_no_cycle() -> None:
    graph = grimp.build_graph("compactor", "readers", cache_dir=None)
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    cycles = [group for group in strongly_connected(edges) if len(group) > 1]
    assert cycles == []


def test_a_cycle_is_found() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"], ["d"]]


def _private_definitions(files: list[Path]) -> set[str]:
    """Private names the files define: functions, methods, classes, names assigned in a class body and
    ``self._x`` / ``cls._x`` attributes."""
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        targets = item.targets if isinstance(item, ast.Assign) else (
                            [item.target] if isinstance(item, ast.AnnAssign) else [])
                        names.update(t.id for t in targets if isinstance(t, ast.Name))
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in ("self", "cls")):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_uses(source: str, packages: tuple[str, ...], private: set[str]) -> list[str]:
    """Where ``source`` uses the private API of ``packages``: a private name or module imported from one of them,
    or an attribute that they define as private read off anything but ``self``/``cls``."""
    def ours(module: str) -> bool:
        return module.split(".", maxsplit=1)[0] in packages

    def hidden(module: str) -> bool:
        return any(part.startswith("_") for part in module.split("."))

    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and ours(node.module or ""):
            uses += [f"line {node.lineno}: {a.name}" for a in node.names
                     if hidden(node.module or "") or a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            uses += [f"line {node.lineno}: {a.name}" for a in node.names if ours(a.name) and hidden(a.name)]
        elif (isinstance(node, ast.Attribute) and node.attr in private
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            uses.append(f"line {node.lineno}: {ast.unparse(node)}")
    return uses


PRODUCT = sorted(p.relative_to(ROOT) for package in ("compactor", "readers") for p in (ROOT / package).rglob("*.py"))


PYICEBERG_FENCE = Path("compactor/iceberg/internals.py")
PYSPARK_FENCE = Path("compactor/spark/internals.py")


def uses_outside(fence: Path, packages: tuple[str, ...],
                 other_fence: Path | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """The private uses of ``packages`` in every product module but ``fence`` (and ``other_fence``, another
    library's fence, whose private names are that library's), and those in ``fence``."""
    import importlib

    library_files = sorted(p for package in packages
                           for p in Path(importlib.import_module(package).__file__ or "").parent.rglob("*.py"))
    # names we define ourselves are ours to use (``consumer._move`` is not the library's, whatever it names)
    private = (_private_definitions(library_files)
               - _private_definitions([ROOT / p for p in PRODUCT if p != fence]))
    found = {str(p): uses for p in PRODUCT if p not in (fence, other_fence)
             and (uses := private_uses((ROOT / p).read_text(encoding="utf-8"), packages, private))}
    return found, private_uses((ROOT / fence).read_text(encoding="utf-8"), packages, private)


def test_only_one_module_uses_pyicebergs_private_api() -> None:
    """Every private pyiceberg name the product uses is in ``iceberg.internals``, commented there with why and
    the version it was checked against (one place to re-check on a pyiceberg upgrade)."""
    found, fenced = uses_outside(PYICEBERG_FENCE, ("pyiceberg",))
    assert found == {}
    assert fenced


def test_only_one_module_uses_pysparks_private_api() -> None:
    """Every private PySpark or py4j name the product uses (``_jvm``, ``_jdf``, ``_jsparkSession``,
    ``SparkSession._activeSession``, ...) is in ``spark.internals``, commented there with why and the version it
    was checked against."""
    # pyiceberg's fence uses pyiceberg's ``Transaction._table``, a name PySpark's classes also use
    found, fenced = uses_outside(PYSPARK_FENCE, ("pyspark", "py4j"), other_fence=PYICEBERG_FENCE)
    assert found == {}
    assert {use.split(": ")[1].rsplit(".", 1)[-1].split("(")[0] for use in fenced} >= {
        "_jvm", "_jdf", "_jsparkSession", "_activeSession", "_active_spark_context", "_ensure_initialized"}


def test_a_private_use_is_found() -> None:
    source = ("from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files\n"
              "import pyiceberg._private\n"
              "tx._updates\nself._updates\n")
    assert private_uses(source, ("pyiceberg",), {"_updates"}) == [
        "line 1: _read_all_delete_files", "line 2: pyiceberg._private", "line 3: tx._updates"]
    spark = "from pyspark.sql.column import _to_seq\nSparkSession._activeSession = s\ndf._jdf\ncls._jdf\n"
    assert private_uses(spark, ("pyspark", "py4j"), {"_activeSession", "_jdf"}) == [
        "line 1: _to_seq", "line 2: SparkSession._activeSession", "line 3: df._jdf"]


def test_phase_two_logic_imports_no_io() -> None:
    """Phase 2's (and phase 1's) pure DataFrame logic imports, within the product, only other pure modules:
    column names and table layouts, record rules, the strategies; no catalog, storage or commit module."""
    graph = grimp.build_graph("compactor", cache_dir=None)
    pure = {"compactor.schema", "compactor.clock", "compactor.errors", "compactor.topics.record_rules",
            "compactor.topics.strategy", "compactor.compaction.phase1.latest", "compactor.compaction.phase1.ranking",
            "compactor.compaction.phase2.rows", "compactor.spark.expressions"}
    for module in ("compactor.compaction.phase2.rows", "compactor.compaction.phase1.latest",
                   "compactor.compaction.phase1.ranking"):
        assert graph.find_upstream_modules(module) <= pure, module
