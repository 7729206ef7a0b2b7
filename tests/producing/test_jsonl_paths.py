"""JSON Lines input has two parsers (``compactor.producing.jsonl``): pyarrow's reader for plain blocks, the exact
parser for everything else. They must agree on what is valid: every rejection rule is run here in a block that
the fast reader would take (its neighbours are plain text) and in one that only the exact parser takes (a
neighbour has a base64 key). Each must fail with the line of the bad record and commit nothing.

Invalid UTF-8 is the rule the fast reader missed: pyarrow copies string bytes unchecked.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli.main import main
from compactor.lake import Lake
from compactor.producing import jsonl
from tests.producing.test_jsonl_exact import BAD_RECORDS

NEIGHBOURS = {
    "fast": b'{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n',
    "exact": b'{"key": {"base64": "/w=="}, "value": "1"}\n{"key": "b", "value": "2"}\n',
}
NOT_UTF8 = [
    (b'{"key": "k\xff\xfe", "value": "v\xc3"}', "not UTF-8"),       # the reported lines
    (b'{"key": "ok", "value": "x\xc3"}', "not UTF-8"),               # a truncated sequence in a value
    (b'{"key": "k", "value": "v", "headers": [["h", "\xed\xa0\x80"]]}', "not UTF-8"),  # an encoded surrogate
    (b'{"key": "k", "value": "v", "headers": [["h\x80", "x"]]}', "not UTF-8"),  # a header key
    (b'{"key": "k", "value": "\xc0\xaf"}', "not UTF-8"),             # an overlong encoding
]
TOPIC_RULES = [  # rules that need the topic: its partition count and max.message.bytes
    (b'{"key": "k", "value": "v", "partition": 7}', "partition 7 is out of range"),
    (b'{"key": "k", "value": "v", "partition": -1}', "partition -1 is out of range"),
    (b'{"key": "k", "value": "' + b"x" * 2000 + b'"}', "max.message.bytes"),
]
CASES = [(line.encode(), message) for line, message in BAD_RECORDS] + NOT_UTF8 + TOPIC_RULES


@pytest.mark.parametrize("path", list(NEIGHBOURS))
def test_the_neighbours_take_the_path_they_are_named_for(path: str) -> None:
    block = NEIGHBOURS[path]
    fast = jsonl._fast(block, jsonl.content_lines(block, 1))
    assert (fast is not None) == (path == "fast")


@pytest.mark.parametrize("path", list(NEIGHBOURS))
@pytest.mark.parametrize("bad, message", CASES)
def test_each_rule_rejects_through_both_paths(lake: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch, path: str, bad: bytes,
                                              message: str) -> None:
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    lake.create_topic("j.bad", partitions=2, config={"max.message.bytes": "1000"})
    source = tmp_path / "in.jsonl"
    source.write_bytes(NEIGHBOURS[path] + bad + b"\n" + b'{"key": "c", "value": "3"}\n')
    code = main(["--warehouse", lake.config.warehouse, "produce", "j.bad", "--file", str(source)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert message in err and "line 3" in err, err
    assert lake.topic("j.bad").snapshot is None, "a rejected batch committed"


@pytest.mark.parametrize("path", list(NEIGHBOURS))
def test_a_byte_order_mark_at_the_start_is_dropped(path: str) -> None:
    """Stripped before either parser sees the block: it never ends up inside the first key."""
    batches = list(jsonl.read_jsonl(io.BytesIO(b"\xef\xbb\xbf" + NEIGHBOURS[path])))
    keys = [key for batch, _ in batches for key in batch.column("key").to_pylist()]
    assert keys[0] in (b"a", b"\xff") and keys[1] == b"b"
    assert all(not key.startswith(b"\xef\xbb\xbf") for key in keys)


@pytest.mark.parametrize("path", list(NEIGHBOURS))
def test_a_byte_order_mark_elsewhere_is_not_json(path: str) -> None:
    with pytest.raises(Exception, match="line 3"):
        list(jsonl.read_jsonl(io.BytesIO(NEIGHBOURS[path] + b'\xef\xbb\xbf{"key": "c", "value": "3"}\n')))


def test_a_byte_order_mark_only_at_the_start_of_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """With small blocks, a later block that starts with the mark keeps it (and is refused)."""
    monkeypatch.setattr(jsonl, "BLOCK_BYTES", 32)
    text = b'{"key": "a", "value": "1"}\n' * 3 + b'\xef\xbb\xbf{"key": "b", "value": "2"}\n'
    with pytest.raises(Exception, match="line 4"):
        list(jsonl.read_jsonl(io.BytesIO(text)))


@pytest.mark.parametrize("bad, message", CASES)
def test_a_bad_record_past_the_first_block_names_its_own_line(
        lake: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        bad: bytes, message: str) -> None:
    """Small blocks: the bad record is in a later block, and the error names the stream's line, not the
    block's (the exact parser used to number lines from each block's start)."""
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    monkeypatch.setattr(jsonl, "BLOCK_BYTES", 64)
    lake.create_topic("j.late", partitions=2, config={"max.message.bytes": "1000"})
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"key": "a", "value": "1"}\n' * 4 + bad + b"\n")
    code = main(["--warehouse", lake.config.warehouse, "produce", "j.late", "--file", str(source)])
    err = capsys.readouterr().err
    assert code == 1 and message in err and "line 5" in err, err
    assert lake.topic("j.late").snapshot is None


def test_invalid_utf8_on_standard_input_in_a_fresh_process(lake: Lake) -> None:
    """The reported commands, as users run them: a line-numbered error, exit 1, nothing committed."""
    lake.create_topic("j.stdin")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COMPACTOR_CATALOG_NAME": lake.config.catalog_name}
    command = [sys.executable, "-m", "compactor.cli.main", "--warehouse", lake.config.warehouse, "produce", "j.stdin"]
    for data, line in ((b'{"key": "k\xff\xfe", "value": "v\xc3"}\n', 1),
                       (b'{"key": "ok", "value": "x"}\n{"key": "k\xff", "value": "v"}\n', 2)):
        proc = subprocess.run(command, input=data, capture_output=True, env=env, timeout=120, check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stdout == b""
        err = proc.stderr.decode()
        assert f"line {line}" in err and "not UTF-8" in err, err
        assert len([x for x in err.splitlines() if x.startswith("compactor: error")]) == 1
    assert lake.topic("j.stdin").snapshot is None
