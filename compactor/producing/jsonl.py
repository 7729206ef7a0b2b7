"""Streaming JSON Lines input in chunks: Arrow's JSON reader for the common case, the exact parser otherwise.

The input is read in blocks of whole lines (``BLOCK_BYTES``), so memory is bounded by one block whatever the
file size. Each block is first parsed by pyarrow's JSON reader against the record schema (text keys, values
and header values; integer partition, timestamp and offset). That reader refuses everything the record format
leaves to the exact parser (``{"base64": ...}`` objects, headers given as an object, wrong types, unknown or
duplicate fields, invalid JSON), and a block it accepts is also checked to hold one record per non-blank line
(pyarrow would accept two objects on one line). pyarrow does not check that strings are UTF-8, so a block
goes to the fast reader only once it decodes as UTF-8. Any doubt sends the block to ``jsonl_exact.parse_lines``,
which decodes it record by record and reports the exact line of the first bad record, as it always has.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from compactor.errors import InputError
from compactor.producing.arrow_input import RowNumbers, normalise, records_to_batch
from compactor.producing.jsonl_exact import parse_lines

BLOCK_BYTES = 4 * 1024 * 1024
UTF8_BOM = b"\xef\xbb\xbf"
_FAST_SCHEMA = pa.schema([
    ("key", pa.string()), ("value", pa.string()), ("partition", pa.int64()), ("timestamp_ms", pa.int64()),
    ("headers", pa.list_(pa.list_(pa.string()))), ("offset", pa.int64()),
])
_PARSE_OPTIONS = pj.ParseOptions(explicit_schema=_FAST_SCHEMA, unexpected_field_behavior="error",
                                 newlines_in_values=False)


def blocks(stream: BinaryIO, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[bytes, int]]:
    """Whole-line blocks of ``stream`` with the line number of each block's first line.

    A UTF-8 byte-order mark at the very start of the stream is dropped (editors on Windows write one); anywhere
    else it is an ordinary character, which JSON refuses outside a string."""
    carry = b""
    line = 1
    while True:
        data = stream.read(block_bytes)
        if not data:
            break
        data = carry + data
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        block, carry = data[:cut + 1], data[cut + 1:]
        yield _without_mark(block) if line == 1 else block, line
        line += block.count(b"\n")
    if carry:
        yield _without_mark(carry) if line == 1 else carry, line


def _without_mark(block: bytes) -> bytes:
    return block[len(UTF8_BOM):] if block.startswith(UTF8_BOM) else block


def content_lines(block: bytes, first_line: int) -> np.ndarray:
    """Line numbers of the block's lines that hold something other than JSON whitespace (one pass: the maximum
    of "is content" over each line's bytes, trailing newline included, so no line is empty)."""
    data = np.frombuffer(block, np.uint8)
    if not len(data):
        return np.zeros(0, np.int64)
    newlines = np.flatnonzero(data == ord("\n"))
    ends_with_newline = bool(len(newlines)) and newlines[-1] == len(data) - 1
    starts = np.concatenate(([0], newlines[:-1] + 1 if ends_with_newline else newlines + 1))
    content = ((data != ord(" ")) & (data != ord("\t")) & (data != ord("\r")) & (data != ord("\n"))).view(np.uint8)
    filled = np.maximum.reduceat(content, starts) > 0
    return np.flatnonzero(filled).astype(np.int64) + first_line


def _fast(block: bytes, lines: np.ndarray) -> pa.RecordBatch | None:
    try:
        table = pj.read_json(io.BytesIO(block), read_options=pj.ReadOptions(block_size=max(len(block), 1 << 20)),
                             parse_options=_PARSE_OPTIONS)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(lines):
        return None
    try:
        return normalise(table.combine_chunks().to_batches()[0], RowNumbers(lines=lines, unit="line"))
    except InputError:
        return None  # the exact parser reports it with its own words


def _exact(block: bytes, first_line: int, source: str) -> tuple[pa.RecordBatch, np.ndarray]:
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + block[:exc.start].count(b"\n")
        raise InputError(f"{source} is not UTF-8 text (line {line}: {exc.reason})") from None
    parsed = list(parse_lines(text.split("\n"), first_line))
    lines = np.asarray([n for n, _ in parsed], np.int64)
    return records_to_batch([r for _, r in parsed]), lines  # in the normalised layout already


def _is_utf8(block: bytes) -> bool:
    """Whether ``block`` is valid UTF-8. pyarrow's JSON reader copies string bytes unchecked, so the fast path
    would store invalid text as raw bytes; a block that fails goes to the exact parser, which names the line."""
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_jsonl(stream: BinaryIO, source: str = "standard input",
               block_bytes: int | None = None) -> Iterator[tuple[pa.RecordBatch, RowNumbers]]:
    """Normalised record batches of a JSON Lines stream, each with the line numbers of its records."""
    for block, first_line in blocks(stream, block_bytes or BLOCK_BYTES):
        lines = content_lines(block, first_line)
        if not len(lines):
            continue
        # pyarrow would also skip a mark at the start of a later block: that one goes to the exact parser
        plain = _is_utf8(block) and not block.startswith(UTF8_BOM)
        batch = _fast(block, lines) if plain else None
        if batch is None:
            batch, lines = _exact(block, first_line, source)
        yield batch, RowNumbers(lines=lines, unit="line")


__all__ = ["blocks", "content_lines", "read_jsonl"]
