"""The command line's process entry (``compactor.cli.main.run``): what a ``compactor`` process sets up that an
in-process ``main`` call does not (the collector's frozen generation, the allocator's huge pages)."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.cli.main import main, run
from compactor.lake import Lake

ROOT = Path(__file__).resolve().parents[2]


def test_the_script_and_module_run_the_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["compactor"] == "compactor.cli.main:run"
    assert "sys.exit(run())" in (ROOT / "compactor" / "cli" / "main.py").read_text()
    assert "sys.exit(run())" in (ROOT / "compactor" / "cli" / "submit.py").read_text()


def test_run_returns_mains_status_and_freezes_what_is_alive(lake: Lake, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tuned: list[bool] = []

    def keep_freed_memory() -> bool:  # leaves this process's malloc as it is
        tuned.append(True)
        return True

    monkeypatch.setattr(cli_main, "keep_freed_memory", keep_freed_memory)
    args = ["--warehouse", lake.config.warehouse, "topic", "list"]
    assert main([*args[:2], "topic", "create", "x.y"]) == 0  # a lake to list (under the command line's catalog name)
    assert gc.get_freeze_count() == 0
    try:
        assert main(args) == 0 and gc.get_freeze_count() == 0 and not tuned  # in-process callers: unchanged
        assert run(args) == 0 and gc.get_freeze_count() > 0 and tuned == [True]
        assert run([*args[:2], "topic", "describe", "no.such"]) == 1  # a failure's status passes through
    finally:
        gc.unfreeze()
    capsys.readouterr()


def test_a_command_keeps_freed_memory_on_glibc() -> None:
    done = subprocess.run([sys.executable, "-c", "from compactor.cli.main import keep_freed_memory as k; "
                           "print(k())"], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == ("True" if platform.libc_ver()[0] == "glibc" else "False")


def allocator_option(env: dict[str, str], name: str) -> str:
    """An option of Arrow's bundled mimalloc in a fresh ``compactor --help`` process (its verbose start-up);
    ``env`` on top of this environment less any ``MIMALLOC_ALLOW_THP`` (importing ``compactor.cli`` set one)."""
    base = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ALLOW_THP"}
    done = subprocess.run([sys.executable, "-m", "compactor.cli.main", "--help"], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(ROOT), "MIMALLOC_VERBOSE": "1", **env}, check=True)
    lines = [line for line in done.stderr.splitlines() if f"option '{name}'" in line]
    assert lines, done.stderr[-2000:]
    return lines[0].split(":")[1].strip()


def test_a_command_line_process_runs_without_transparent_huge_pages_unless_told() -> None:
    assert allocator_option({}, "allow_thp") == "0"
    assert allocator_option({"MIMALLOC_ALLOW_THP": "1"}, "allow_thp") == "1"  # the user's choice wins
