"""infra/test-tmpdir.sh: each test run's temporary folder is its own and locked while the run lasts; a later run
removes only the folders whose lock nobody holds (and the single shared folder of earlier versions)."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "test-tmpdir.sh"


def run(prefix: Path, min_free_kb: int = 0) -> list[str]:
    """Source the script in a strict shell, call it, and report the folder it made and whether a second opener
    of that folder's lock finds it held (while the shell lives)."""
    shell = f"""set -euo pipefail
. {SCRIPT}
test_tmpdir {prefix} {min_free_kb}
echo "dir=$TEST_TMPDIR"
if [ -n "$TEST_TMPDIR" ]; then
  if flock -n "$TEST_TMPDIR.lock" true; then echo lock=free; else echo lock=held; fi
fi
"""
    done = subprocess.run(["bash", "-c", shell], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_run_gets_a_new_folder_whose_lock_it_holds(tmp_path: Path) -> None:
    prefix = tmp_path / "compactor-tests-0"
    first, second = run(prefix), run(prefix)
    assert first[0] != second[0]
    for out in (first, second):
        made = Path(out[0].removeprefix("dir="))
        assert made.parent == tmp_path and made.name.startswith("compactor-tests-0.")
        assert out[1] == "lock=held"


def test_earlier_folders_go_unless_a_live_run_holds_their_lock(tmp_path: Path) -> None:
    prefix = tmp_path / "compactor-tests-0"
    legacy, dead, live = prefix, Path(f"{prefix}.dead00"), Path(f"{prefix}.live00")
    for folder in (legacy, dead, live):
        (folder / "popen-gw0").mkdir(parents=True)
        (folder / "popen-gw0" / "file").write_text("x")
    Path(f"{dead}.lock").touch()
    with open(f"{live}.lock", "w") as held:  # a run still going: its processes hold the lock
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out = run(prefix)
        made = Path(out[0].removeprefix("dir="))
        assert not legacy.exists() and not dead.exists() and not Path(f"{dead}.lock").exists()
        assert (live / "popen-gw0" / "file").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, f"{live.name}.lock", made.name, f"{made.name}.lock"])
    run(prefix)  # the live run has ended, and so has the one that made ``made``
    assert not live.exists() and not made.exists()


def test_no_folder_without_room(tmp_path: Path) -> None:
    prefix = tmp_path / "compactor-tests-0"
    assert run(prefix, min_free_kb=1 << 60) == ["dir="]
    assert list(tmp_path.iterdir()) == []
