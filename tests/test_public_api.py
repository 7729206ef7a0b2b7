"""The package roots export docs/reference.md's Python API, lazily: importing a root loads neither Spark nor Iceberg."""

from __future__ import annotations

import subprocess
import sys

import compactor
import readers

INTERFACE_COMPACTOR = ["Lake", "ProducerRecord", "produce", "produce_arrow", "produce_dataframe", "Producer",
                       "Consumer", "TwoPhaseCompactor", "run_retention"]
INTERFACE_READERS = ["TopicReader", "read_topic_dataframe"]


def test_every_interface_name_is_exported_and_declared() -> None:
    for name in INTERFACE_COMPACTOR:
        assert name in compactor.__all__ and getattr(compactor, name) is not None
    for name in INTERFACE_READERS:
        assert name in readers.__all__ and getattr(readers, name) is not None
    for root in (compactor, readers):  # and nothing is declared that does not load
        assert all(getattr(root, name) is not None for name in root.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    for root in (compactor, readers):
        try:
            root.NoSuchThing  # noqa: B018
        except AttributeError as exc:
            assert "NoSuchThing" in str(exc)
        else:
            raise AssertionError("an unknown name resolved")


def test_importing_the_roots_is_cheap() -> None:
    code = ("import sys, compactor, readers, compactor.errors; "
            "print(sorted(m for m in ('pyspark', 'pyiceberg', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
