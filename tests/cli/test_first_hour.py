"""What a new user meets in the first hour: messages that say what happened and what to do next."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli.main import main


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str,
        stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_reused_batch_id_names_its_partitions_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    wh = str(tmp_path / "wh")
    run(capsys, monkeypatch, "--warehouse", wh, "topic", "create", "a.t", "--partitions", "2")
    first = '{"key": "k", "value": "1", "partition": 1}\n' * 4 + '{"key": "k", "value": "1", "partition": 0}\n'
    assert run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t", "--batch-id", "B", stdin=first)[0] == 0
    code, out, err = run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t", "--batch-id", "B",
                         stdin='{"key": "k", "value": "2", "partition": 1}\n')
    assert (code, out) == (1, "")
    assert ("batch id 'B' was already used for a different batch: it committed 5 records (partition 0: 1, "
            "partition 1: 4), this batch has 1 record (partition 1: 1); nothing was appended") in err


def test_a_replayed_batch_says_so_on_standard_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    wh = str(tmp_path / "wh")
    run(capsys, monkeypatch, "--warehouse", wh, "topic", "create", "a.t")
    batch = '{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n'
    fresh = run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t", "--batch-id", "B", stdin=batch)
    replay = run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t", "--batch-id", "B", stdin=batch)
    assert fresh[:2] == replay[:2] == (0, '{"partition": 0, "offset": 0}\n{"partition": 0, "offset": 1}\n')
    assert "already committed" not in fresh[2]
    assert "batch id 'B' was already committed" in replay[2] and "nothing was appended" in replay[2]
    out = run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t", "--batch-id", "B", "--output", "summary",
              stdin=batch)
    assert json.loads(out[1])["duplicate"] is True and "already committed" in out[2]  # the summary form too


def test_an_oversized_record_names_the_setting_to_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    wh = str(tmp_path / "wh")
    run(capsys, monkeypatch, "--warehouse", wh, "topic", "create", "a.t", "--config", "max.message.bytes=10")
    code, out, err = run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t",
                         stdin='{"key": "k", "value": "0123456789abc"}\n')
    assert (code, out) == (1, "")
    assert "line 1: record of 14 bytes exceeds max.message.bytes (10)" in err
    assert "compactor topic config NAME --set max.message.bytes=14" in err
    run(capsys, monkeypatch, "--warehouse", wh, "topic", "config", "a.t", "--set", "max.message.bytes=14")
    assert run(capsys, monkeypatch, "--warehouse", wh, "produce", "a.t",
               stdin='{"key": "k", "value": "0123456789abc"}\n')[:2] == (0, '{"partition": 0, "offset": 0}\n')


def test_global_options_are_accepted_after_the_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    wh = str(tmp_path / "wh")
    monkeypatch.delenv("COMPACTOR_WAREHOUSE", raising=False)
    assert run(capsys, monkeypatch, "topic", "create", "a.t", "--warehouse", wh)[0] == 0
    assert run(capsys, monkeypatch, "produce", "a.t", f"--warehouse={wh}", stdin='{"key": "k", "value": "v"}\n')[0] == 0
    # after the verb wins over before it; nested verbs (topic list) take them too
    code, out, _ = run(capsys, monkeypatch, "--warehouse", str(tmp_path / "other"), "topic", "list",
                       "--warehouse", wh, "--log-level", "error")
    assert (code, out.split()) == (0, ["a.t"])
    assert not (tmp_path / "other").exists()
    with pytest.raises(SystemExit) as usage:  # checked there as before the verb
        main(["topic", "list", "--log-level", "loud"])
    assert usage.value.code == 2 and "log level 'loud'" in capsys.readouterr().err

    # as a user runs it: a fresh process
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    result = subprocess.run([sys.executable, "-m", "compactor.cli.main", "read", "a.t", "--raw", "--warehouse", wh],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["value"] for line in result.stdout.splitlines()] == ["v"]
