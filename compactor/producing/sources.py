"""Record sources for the command line: JSON Lines, Parquet and Arrow IPC, read in bounded chunks.

Every source yields ``(record batch, RowNumbers)`` pairs of at most ``CHUNK_ROWS`` rows (JSON Lines: one block
of about 4 MB of lines), so producing a file never holds more than a chunk of it. Errors name the line of
JSON Lines input and the 1-based row of columnar input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from compactor.errors import InputError
from compactor.producing.arrow_input import Chunk, RowNumbers, numbered_chunks
from compactor.producing.jsonl import read_jsonl

FORMATS = ("jsonl", "parquet", "arrow")
CHUNK_ROWS = 65_536


def read_parquet(path: str) -> Iterator[Chunk]:
    try:
        handle = pq.ParquetFile(path, memory_map=True)  # a local file: pages mapped, not copied into buffers
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot read {path} as Parquet: {exc}") from None
    with handle:
        yield from numbered_chunks(handle.iter_batches(batch_size=CHUNK_ROWS), CHUNK_ROWS)


def read_arrow(stream: BinaryIO, source: str) -> Iterator[Chunk]:
    """Arrow IPC, file or stream format."""
    data = pa.PythonFile(stream, mode="r")
    try:
        if stream.seekable():
            try:
                reader = pa.ipc.open_file(data)
                yield from numbered_chunks((reader.get_batch(i) for i in range(reader.num_record_batches)), CHUNK_ROWS)
                return
            except pa.ArrowInvalid:
                stream.seek(0)
        yield from numbered_chunks(pa.ipc.open_stream(data), CHUNK_ROWS)
    except pa.ArrowInvalid as exc:
        raise InputError(f"cannot read {source} as Arrow IPC: {exc}") from None


def read_source(fmt: str, stream: BinaryIO | None, path: str | None, source: str) -> Iterator[Chunk]:
    """The chunks of one input in format ``fmt`` (``path`` for Parquet, ``stream`` otherwise)."""
    if fmt == "jsonl":
        assert stream is not None
        return read_jsonl(stream, source)
    if fmt == "parquet":
        if path is None:
            raise InputError("Parquet input needs --file (it is not read from standard input)")
        return read_parquet(path)
    if fmt == "arrow":
        assert stream is not None
        return read_arrow(stream, source)
    raise InputError(f"unknown format {fmt!r} (use {', '.join(FORMATS)})")


def split(chunks: Iterator[Chunk], records: int) -> Iterator[Iterator[Chunk]]:
    """The input as consecutive groups of at most ``records`` rows (each group one atomic batch)."""
    pending: list[Chunk] = []

    def refill() -> bool:
        if pending:
            return True
        try:
            pending.append(next(chunks))
        except StopIteration:
            return False
        return True

    def group() -> Iterator[Chunk]:
        left = records
        while left > 0 and refill():
            batch, rows = pending.pop()
            if batch.num_rows <= left:
                left -= batch.num_rows
                yield batch, rows
                continue
            yield batch.slice(0, left), rows
            pending.append((batch.slice(left), _after(rows, left)))
            left = 0

    while refill():
        yield group()


def _after(rows: RowNumbers, skipped: int) -> RowNumbers:
    if rows.lines is not None:
        return RowNumbers(lines=rows.lines[skipped:], unit=rows.unit)
    return RowNumbers(rows.first + skipped, unit=rows.unit)


__all__ = ["FORMATS", "read_source", "split"]
