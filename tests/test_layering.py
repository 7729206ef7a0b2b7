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


PRIVATE_API_MODULE = Path("compactor/iceberg/internals.py")


def _private_definitions(files: list[Path]) -> set[str]:
    """Private names the files define: functions, methods, classes and ``self._x`` attributes."""
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_pyiceberg_uses(source: str, pyiceberg_private: set[str]) -> list[str]:
    """Where ``source`` uses pyiceberg's private API: a private name or module imported from pyiceberg, or an
    attribute that pyiceberg defines as private read off anything but ``self``/``cls``."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg":
            private_module = any(part.startswith("_") for part in (node.module or "").split("."))
            uses += [f"line {node.lineno}: {a.name}" for a in node.names if private_module or a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            uses += [f"line {node.lineno}: {a.name}" for a in node.names if a.name.split(".")[0] == "pyiceberg"
                     and any(part.startswith("_") for part in a.name.split("."))]
        elif (isinstance(node, ast.Attribute) and node.attr in pyiceberg_private
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            uses.append(f"line {node.lineno}: {ast.unparse(node)}")
    return uses


def test_only_one_module_uses_pyicebergs_private_api() -> None:
    """Every private pyiceberg name the product uses is in ``iceberg.internals``, commented there with why and
    the version it was checked against (one place to re-check on a pyiceberg upgrade)."""
    import pyiceberg

    ours = sorted(p.relative_to(ROOT) for package in ("compactor", "readers") for p in (ROOT / package).rglob("*.py"))
    # names we define ourselves are ours to use (``consumer._move`` is not pyiceberg's, whatever pyiceberg names)
    private = (_private_definitions(sorted(Path(pyiceberg.__file__).parent.rglob("*.py")))
               - _private_definitions([ROOT / p for p in ours if p != PRIVATE_API_MODULE]))
    found = {str(p): uses for p in ours if p != PRIVATE_API_MODULE
             and (uses := private_pyiceberg_uses((ROOT / p).read_text(encoding="utf-8"), private))}
    assert found == {}
    assert private_pyiceberg_uses((ROOT / PRIVATE_API_MODULE).read_text(encoding="utf-8"), private)


def test_a_private_pyiceberg_use_is_found() -> None:
    source = ("from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files\n"
              "import pyiceberg._private\n"
              "tx._updates\nself._updates\n")
    assert private_pyiceberg_uses(source, {"_updates"}) == [
        "line 1: _read_all_delete_files", "line 2: pyiceberg._private", "line 3: tx._updates"]
