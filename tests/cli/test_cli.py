"""The command line: the verbs of docs/reference.md, their output, and exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli.main import main


def run(capsys: pytest.CaptureFixture[str], warehouse: Path, *args: str, stdin: str | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        import io

        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["--warehouse", str(warehouse), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_create_produce_read_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    wh = tmp_path / "wh"
    code, out, _ = run(capsys, wh, "topic", "create", "demo.orders", "--partitions", "2",
                       "--config", "cleanup.policy=compact")
    assert code == 0 and json.loads(out)["partitions"] == 2
    lines = [
        '{"key": "user-1", "value": "{\\"n\\":1}", "timestamp_ms": 1767225600000, "headers": [["trace", "abc"]]}',
        '{"key": "user-1", "value": null, "partition": 1}',
        '{"key": {"base64": "/w=="}, "value": {"base64": "gA=="}, "headers": {"a": "b"}}',
    ]
    code, out, _ = run(capsys, wh, "produce", "demo.orders", stdin="\n".join(lines) + "\n", monkeypatch=monkeypatch)
    assert code == 0
    positions = [json.loads(line) for line in out.splitlines()]
    assert len(positions) == 3 and all(set(p) == {"partition", "offset"} for p in positions)
    assert positions[1] == {"partition": 1, "offset": 0}
    code, out, _ = run(capsys, wh, "read", "demo.orders", "--raw")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(records) == 3
    assert all(set(r) == {"partition", "offset", "timestamp_ms", "key", "value", "headers"} for r in records)
    by_value = {json.dumps(r["value"]): r for r in records}
    assert by_value['"{\\"n\\":1}"']["headers"] == [["trace", "abc"]]
    assert by_value["null"]["key"] == "user-1"
    assert by_value['{"base64": "gA=="}']["key"] == {"base64": "/w=="}
    assert by_value['{"base64": "gA=="}']["headers"] == [["a", "b"]]


def test_produce_from_file_with_batch_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = tmp_path / "wh"
    run(capsys, wh, "topic", "create", "a.t")
    data = tmp_path / "in.jsonl"
    data.write_text('{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n')
    first = run(capsys, wh, "produce", "a.t", "--file", str(data), "--batch-id", "x1")
    second = run(capsys, wh, "produce", "a.t", "--file", str(data), "--batch-id", "x1")
    assert first[:2] == second[:2] == (0, '{"partition": 0, "offset": 0}\n{"partition": 0, "offset": 1}\n')
    assert "already committed" not in first[2] and "'x1' was already committed" in second[2]  # the replay, said
    _, out, _ = run(capsys, wh, "read", "a.t", "--raw")
    assert len(out.splitlines()) == 2


def test_errors_exit_nonzero_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wh = tmp_path / "wh"
    run(capsys, wh, "topic", "create", "a.t")
    cases = [
        (("topic", "create", "a.t"), 1, "already exists"),
        (("topic", "describe", "a.nope"), 1, "unknown topic"),
        (("topic", "config", "a.t", "--set", "retention.ms=soon"), 1, "retention.ms must be an integer"),
        (("topic", "config", "a.t", "--set", "colour=red"), 1, "unknown setting"),
        (("topic", "config", "a.t", "--set", "novalue"), 2, "KEY=VALUE"),
        (("read", "a.t", "--raw", "--from-offset", "0:5"), 1, "out of range"),
        (("read", "a.t", "--raw", "--from-offset", "zero"), 2, "PARTITION:OFFSET"),
        (("produce", "a.t", "--file", str(tmp_path / "missing.jsonl")), 1, "cannot read"),
    ]
    for args, expected, message in cases:
        code, _, err = run(capsys, wh, *args)
        assert code == expected, args
        assert message in err and len(err.strip().splitlines()) == 1, (args, err)
    code, _, err = run(capsys, wh, "produce", "a.t", stdin='{"key": "a", "value": "1"}\n{"key": 1}\n',
                       monkeypatch=monkeypatch)
    assert code == 1 and "line 2" in err
    _, out, _ = run(capsys, wh, "read", "a.t", "--raw")
    assert out == ""


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--warehouse", str(tmp_path), "read", "a.t"])  # neither --raw nor --compacted
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_list_and_describe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = tmp_path / "wh"
    run(capsys, wh, "topic", "create", "b.t")
    run(capsys, wh, "topic", "create", "a.t")
    assert run(capsys, wh, "topic", "list")[1].split() == ["a.t", "b.t"]
    code, out, _ = run(capsys, wh, "topic", "describe", "a.t", "--json")
    info = json.loads(out)
    assert code == 0 and info["next_offsets"] == {"0": 0} and "erasure_bound" in info
    code, out, _ = run(capsys, wh, "topic", "describe", "a.t")
    assert code == 0 and "erasure bound" in out


def test_environment_selects_the_warehouse(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_WAREHOUSE", str(tmp_path / "envwh"))
    assert main(["topic", "create", "a.t"]) == 0
    assert (tmp_path / "envwh" / "catalog.db").exists()


VERBS = [["produce", "a.t"], ["read", "a.t", "--raw"], ["read", "a.t", "--compacted"], ["topic", "list"],
         ["topic", "describe", "a.t"], ["status", "a.t", "--json"], ["status", "a.t"], ["retention", "a.t"]]


def test_non_spark_verbs_never_start_a_jvm(tmp_path: Path) -> None:
    """topic, produce, read, status and retention under delete (and their imports) must not load pyspark."""
    script = f"""
import io, json, sys
from compactor.cli.main import main
wh = {str(tmp_path / 'wh')!r}
codes = [main(["--warehouse", wh, "topic", "create", "a.t"])]
sys.stdin = io.StringIO('{{"key": "k", "value": "v"}}\\n')
for verb in {VERBS!r}:
    codes.append(main(["--warehouse", wh, *verb]))
sys.stderr.write("RESULT " + json.dumps({{"codes": codes, "pyspark": "pyspark" in sys.modules}}) + "\\n")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stderr.split("RESULT ")[-1])
    assert outcome == {"codes": [0] * (len(VERBS) + 1), "pyspark": False}, result.stderr


def test_progress_lines_follow_the_current_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler main() installs must not keep writing to a stream that was swapped out (and closed)."""
    import io
    import logging

    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    assert main(["--warehouse", str(tmp_path / "wh"), "topic", "create", "a.t"]) == 0
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("compactor.test").info("after main returned")
    assert "after main returned" in second.getvalue()
    assert "Logging error" not in second.getvalue()


def test_unexpected_java_errors_name_the_java_exception(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Py4J failure's first line says only "An error occurred while calling o59.sql."; the CLI names the
    Java exception from the next line instead."""
    from compactor.cli import topic_verbs as commands

    class Py4JJavaError(Exception):
        pass

    def boom(args: object) -> int:
        raise Py4JJavaError("An error occurred while calling o59.sql.\n: org.apache.iceberg.exceptions."
                            "CommitFailedException: Table metadata refresh is required\n\tat org.apache...")

    monkeypatch.setattr(commands, "topic_list", boom)
    code = main(["--warehouse", str(tmp_path / "wh"), "topic", "list"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == ("compactor: error: Py4JJavaError: org.apache.iceberg.exceptions.CommitFailedException: "
                           "Table metadata refresh is required")


def test_compact_refuses_a_topic_whose_policy_lacks_compact(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any Spark work: the error names the policy (no JVM starts)."""
    wh = tmp_path / "wh"
    assert run(capsys, wh, "topic", "create", "a.t")[0] == 0
    code, _, err = run(capsys, wh, "compact", "a.t")
    assert code == 1 and "cleanup.policy=delete" in err
    assert err.strip().splitlines()[-1].startswith("compactor: error:")


def test_compact_unknown_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, tmp_path / "wh", "topic", "create", "a.t")[0] == 0
    code, _, err = run(capsys, tmp_path / "wh", "compact", "a.nope")
    assert code == 1 and "unknown topic 'a.nope'" in err
    assert f"{tmp_path / 'wh'}" in err and "catalog 'lake'" in err  # where it looked


def test_submit_module_is_the_command_line(tmp_path: Path) -> None:
    """``spark-submit compactor/cli/submit.py ARGS`` runs the same command line as ``compactor ARGS``."""
    result = subprocess.run([sys.executable, "-m", "compactor.cli.submit", "--warehouse",
                             str(tmp_path / "wh"), "topic", "create", "a.t"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["created"] is True
