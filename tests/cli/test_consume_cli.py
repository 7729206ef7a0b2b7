"""``compactor consume`` and ``compactor group ...`` (docs/reference.md), in process and, for the fresh-process and
kill -9 cases, as subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from compactor import Consumer, TopicPartition
from compactor.cli.main import main
from compactor.groups import GroupStore
from compactor.lake import Lake
from tests.consumers import produce_keys

T = "shop.orders"


def cli(capsys: pytest.CaptureFixture[str], lake: Lake, *args: str) -> tuple[int, str, str]:
    code = main(["--warehouse", lake.config.warehouse, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def named(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> Lake:
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)  # the CLI opens the same catalog
    lake.create_topic(T, partitions=2)
    return lake


def test_consume_prints_read_format_commits_and_stops(named: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    produce_keys(named, T, ["a", "b", "c"], partition=0)
    _, read_out, _ = cli(capsys, named, "read", T, "--raw")
    code, out, _ = cli(capsys, named, "consume", T, "--group", "g", "--raw", "--max-records", "2")
    assert code == 0 and out.splitlines() == read_out.splitlines()[:2]
    started = time.monotonic()
    code, out, _ = cli(capsys, named, "consume", T, "--group", "g", "--compacted", "--timeout-ms", "300")
    assert code == 0 and out.splitlines() == read_out.splitlines()[2:]
    assert time.monotonic() - started >= 0.3  # waited --timeout-ms for something new before exiting
    code, out, _ = cli(capsys, named, "consume", T, "--group", "g", "--raw", "--timeout-ms", "0")
    assert (code, out) == (0, "")
    code, out, _ = cli(capsys, named, "status", T, "--json")
    assert json.loads(out)["groups"] == [{"group": "g", "total_lag": 0, "committed": {"0": 3, "1": 0}}]


def test_group_verbs(named: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    produce_keys(named, T, ["a", "b", "c"], partition=0, timestamp_ms=1_000)
    cli(capsys, named, "consume", T, "--group", "g", "--raw", "--max-records", "1")
    code, out, _ = cli(capsys, named, "group", "list", "--json")
    assert json.loads(out) == [{"group": "g", "topics": [T]}]
    code, out, _ = cli(capsys, named, "group", "describe", "g", "--json", "--now-ms", "5000")
    described = json.loads(out)
    first = described["partitions"][0]
    assert (first["committed_offset"], first["log_end_offset"], first["lag"], first["lag_ms"]) == (1, 3, 2, 4000)
    assert first["owner"] is None and first["in_compacted_range"] is False and first["last_reset"] is None
    member = Consumer(named, T, group="g")  # a live member holds leases: reset is refused
    code, out, err = cli(capsys, named, "group", "describe", "g", "--json")
    described = json.loads(out)
    assert [m["member_id"] for m in described["members"]] == [member.member_id]
    assert described["members"][0]["partitions"] == [f"{T}:0", f"{T}:1"]
    assert described["members"][0]["lease_expires_ms"] > time.time() * 1000
    assert {p["owner"] for p in described["partitions"]} == {member.member_id}
    code, _, err = cli(capsys, named, "group", "reset", "g", "--topic", T, "--to", "earliest")
    assert code == 1 and "live members" in err
    code, _, err = cli(capsys, named, "group", "delete", "g")
    assert code == 1 and "live members" in err
    assert GroupStore(named).committed("g", [TopicPartition(T, 0)])[TopicPartition(T, 0)] == 1
    code, out, _ = cli(capsys, named, "group", "reset", "g", "--topic", T, "--to", "offset", "0:2", "--force")
    assert code == 0 and json.loads(out)["positions"] == [{"partition": 0, "from": 1, "to": 2}]
    member.close()
    code, _, err = cli(capsys, named, "group", "reset", "g", "--topic", T, "--to", "offset", "0:9")
    assert code == 1 and "out of range" in err
    code, out, _ = cli(capsys, named, "group", "reset", "g", "--topic", T, "--to", "timestamp", "0:1000")
    assert json.loads(out)["positions"] == [{"partition": 0, "from": 2, "to": 0}]
    code, out, _ = cli(capsys, named, "group", "describe", "g", "--json")
    first = json.loads(out)["partitions"][0]
    assert first["committed_offset"] == 0 and first["last_reset"]["reason"].startswith("group reset --to timestamp")
    for args in (("group", "describe", "nope"), ("group", "delete", "nope"),
                 ("group", "reset", "nope", "--topic", T, "--to", "latest"),
                 ("consume", "shop.missing", "--group", "g", "--raw")):
        code, _, err = cli(capsys, named, *args)
        assert code == 1 and err.startswith("compactor: error:") and len(err.strip().splitlines()) == 1
    assert cli(capsys, named, "group", "delete", "g")[0] == 0
    assert json.loads(cli(capsys, named, "group", "list", "--json")[1]) == []


def _env(lake: Lake) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    env["COMPACTOR_CATALOG_NAME"] = lake.config.catalog_name
    env["COMPACTOR_WAREHOUSE"] = lake.config.warehouse
    return env


def _wait_for(condition: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_consume_follow_in_fresh_processes_killed_and_stopped(named: Lake) -> None:
    produce_keys(named, T, ["a", "b", "c"], partition=0)
    store = GroupStore(named)
    command = [sys.executable, "-m", "compactor.cli.main", "consume", T, "--group", "g", "--raw", "--follow",
               "--session-timeout-ms", "1500"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(named))
    try:
        assert first.stdout is not None
        lines = [json.loads(first.stdout.readline()) for _ in range(3)]
        assert [(r["partition"], r["offset"], r["key"]) for r in lines] == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]
        _wait_for(lambda: store.committed("g", [TopicPartition(T, 0)])[TopicPartition(T, 0)] == 3, 30)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    produce_keys(named, T, ["d"], partition=0)
    killed_at = time.monotonic()
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(named))
    try:
        assert second.stdout is not None
        line = json.loads(second.stdout.readline())  # once the killed member's lease ran out
        assert (line["offset"], line["key"]) == (3, "d")  # nothing committed came again
        assert time.monotonic() - killed_at < 30
        _wait_for(lambda: store.committed("g", [TopicPartition(T, 0)])[TopicPartition(T, 0)] == 4, 30)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, second.stderr.read() if second.stderr else ""
    finally:
        if second.poll() is None:
            second.kill()
    assert store.members("g") == []  # a clean stop left the group at once
    assert {s.owner for s in store.partitions("g")} == {None}


MEMBER_SCRIPT = """
import sys, time
from compactor import Consumer
from compactor.lake import Lake
consumer = Consumer(Lake(), "shop.orders", group="g", session_timeout_ms=1500)
first = [r.offset for r in consumer.poll(max_records=2)]
consumer.commit()
second = [r.offset for r in consumer.poll(max_records=1)]
print("ready", first, second, flush=True)
time.sleep(600)
"""


def test_a_member_killed_with_kill_9_loses_its_partitions_and_only_uncommitted_records_come_again(
        named: Lake) -> None:
    produce_keys(named, T, ["a", "b", "c", "d"], partition=0)
    process = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=_env(named))
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().strip()  # it committed 0 and 1, then read 2 without committing it
        assert ready == "ready [0, 1] [2]", process.stderr.read() if process.stderr else ""
        survivor = Consumer(named, T, group="g", session_timeout_ms=1500, poll_backoff_ms=(20, 100))
        assert TopicPartition(T, 0) not in survivor.assignment()  # the live member still owns it
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        killed_at = time.monotonic()
        got: list[int] = []
        while len(got) < 2 and time.monotonic() - killed_at < 10:
            got += [r.offset for r in survivor.poll(timeout_ms=200) if r.partition == 0]
        assert got == [2, 3]  # the killed member's uncommitted record, then the rest; never 0 or 1
        assert time.monotonic() - killed_at < 1.5 + 1.0 + 2.0  # lease, a heartbeat, and slack
        survivor.close()
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.slow  # processes of their own; the rule itself is in the loop in-process (tests/consumer)
def test_consume_follow_keeps_running_when_a_member_joins_and_takes_a_partition(named: Lake) -> None:
    """Issue 29, defect 2 at the command line: ``consume --follow`` exited 1 when its commit met a rebalance."""
    produce_keys(named, T, ["a", "b"], partition=0)
    produce_keys(named, T, ["c", "d"], partition=1)
    command = [sys.executable, "-m", "compactor.cli.main", "consume", T, "--group", "g", "--raw", "--follow",
               "--session-timeout-ms", "3000"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(named))
    try:
        assert first.stdout is not None
        printed = [json.loads(first.stdout.readline()) for _ in range(4)]
        joined = Consumer(named, T, group="g", session_timeout_ms=3000)
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [(r.partition, r.offset) for r in joined.poll(timeout_ms=200)]
            if not got:
                produce_keys(named, T, ["e"], partition=1)
        assert got and {p for p, _ in got} == {1}, got  # the newcomer took partition 1, from where it was
        joined.commit()
        assert first.poll() is None, first.stderr.read() if first.stderr else ""  # still following
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
        printed += [json.loads(line) for line in first.stdout.read().splitlines()]
        joined.close()
    finally:
        if first.poll() is None:
            first.kill()
    seen = [(r["partition"], r["offset"]) for r in printed] + got
    assert {(0, 0), (0, 1), (1, 0), (1, 1)} <= set(seen)
    assert len(seen) == len(set(seen))  # the revoked partition was committed before it moved: nothing twice


@pytest.mark.slow  # processes of their own; the rule itself is in the loop in-process (tests/consumer)
def test_a_second_consume_with_the_instance_id_fences_the_first(named: Lake) -> None:
    """Issue 29, defect 8 at the command line: two processes with one member id took a partition from each
    other at every heartbeat; with ``--group-instance-id`` the second takes its place and the first stops."""
    produce_keys(named, T, ["a"], partition=0)
    command = [sys.executable, "-m", "compactor.cli.main", "consume", T, "--group", "g", "--raw", "--follow",
               "--session-timeout-ms", "3000", "--group-instance-id", "reporter"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(named))
    second = None
    try:
        assert first.stdout is not None and first.stderr is not None
        assert json.loads(first.stdout.readline())["offset"] == 0
        _wait_for(lambda: GroupStore(named).committed("g", [TopicPartition(T, 0)])[TopicPartition(T, 0)] == 1, 30)
        second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=_env(named))
        assert first.wait(timeout=30) == 1
        assert "took its place" in first.stderr.read()
        produce_keys(named, T, ["b"], partition=0)
        assert second.stdout is not None
        assert json.loads(second.stdout.readline())["offset"] == 1  # from the committed position
        members = GroupStore(named).members("g")
        assert [(m.member_id, m.static) for m in members] == [("reporter", True)]
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
