"""The errors are one small hierarchy: each family heading of ``compactor/errors.py`` names the base its classes
share, and every public exception class of the product derives from ``CompactorError``."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

from compactor import errors

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("InputError", "NotFoundError", "TransientError", "AccessDeniedError", "NotOwnerError", "KafkaSourceError")


def _sections() -> dict[str, list[str]]:
    """The classes under each ``# --- heading: FamilyName`` of errors.py, by family name."""
    sections: dict[str, list[str]] = {}
    family: str | None = None
    for line in Path(errors.__file__).read_text().splitlines():
        heading = re.match(r"# --- [^:]*(?:: (\w+))?", line)
        if heading:
            family = heading.group(1)
            continue
        defined = re.match(r"class (\w+)\(", line)
        if defined and family is not None:
            sections.setdefault(family, []).append(defined.group(1))
    return sections


def test_each_family_heading_holds_only_its_family() -> None:
    sections = _sections()
    assert set(sections) == set(FAMILIES), sections
    for family, names in sections.items():
        base = getattr(errors, family)
        assert names[0] == family or issubclass(getattr(errors, names[0]), base)
        for name in names:
            assert issubclass(getattr(errors, name), base), f"{name} sits under {family} but is not one"


def test_every_class_of_errors_py_is_a_compactor_error_with_its_builtin() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(classes) >= 20
    for cls in classes:
        assert issubclass(cls, errors.CompactorError), cls
    assert issubclass(errors.InputError, ValueError) and issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.AccessDeniedError, PermissionError)
    assert issubclass(errors.KafkaAccessDeniedError, errors.AccessDeniedError)
    assert not errors.is_transient(errors.StorageAccessDeniedError("refused"))
    assert errors.is_transient(errors.StorageUnavailableError("down"))
    assert errors.UsageError.exit_code == 2 and errors.OutcomeUnknownError.exit_code == 75


def _exception_classes() -> list[tuple[str, str]]:
    """Every public class in compactor/ and readers/ (outside errors.py) whose name says it is an error."""
    found = []
    for package in ("compactor", "readers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "errors.py" and path.parent.name == "compactor":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and (
                        node.name.endswith(("Error", "Exception"))):
                    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    found.append((module, node.name))
    return found


def test_every_public_product_exception_is_in_the_hierarchy() -> None:
    found = _exception_classes()
    assert ("readers.streams", "FileReadError") in found  # the scan sees classes outside errors.py
    for module, name in found:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, errors.CompactorError), f"{module}.{name} is outside the hierarchy"
