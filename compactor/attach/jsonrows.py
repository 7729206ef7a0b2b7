"""JSON objects of a few columns of Arrow rows, built column-wise by Arrow kernels (no Python per row).

The record key and value of an attached log are JSON objects of source columns (``attach.records``). For the
column types most sources carry (strings, integers, booleans) the text is assembled by Arrow string kernels:
each column renders to ``"name":value`` (null when the value is null, so the field is left out), and the
fragments are joined with commas. Strings are escaped as ``json.dumps`` escapes them (quote, backslash, the short
forms of ``\\b \\f \\n \\r \\t``); a string with another control character, or a column of another type, makes
``json_objects`` return ``None`` and the caller renders those rows in Python. The result is byte for byte what
``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` writes (tests compare them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

SHORT_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\b", "\\b"), ("\f", "\\f"), ("\n", "\\n"), ("\r", "\\r"),
                 ("\t", "\\t"))
OTHER_CONTROL = "[\\x00-\\x07\\x0b\\x0e-\\x1f]"


def json_objects(columns: Sequence[tuple[str, pa.ChunkedArray | pa.Array]], rows: int) -> pa.Array | None:
    """The JSON object of ``columns`` (name, values) for each of ``rows`` rows, as ``large_binary``; ``None`` when
    a column's type (or a string's characters) needs the Python rendering."""
    fragments: list[pa.Array] = []
    for name, values in columns:
        rendered = _render(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
        if rendered is None:
            return None
        prefix = "," + json.dumps(name, ensure_ascii=False) + ":"
        fragments.append(pc.fill_null(pc.binary_join_element_wise(_text(prefix), rendered, _text("")), _text("")))
    if not fragments:
        return pa.array([b"{}"] * rows, pa.large_binary())
    joined = fragments[0] if len(fragments) == 1 else pc.binary_join_element_wise(*fragments, _text(""))
    body = pc.utf8_slice_codeunits(joined, 1)  # the first fragment's comma
    text: pa.Array = pc.binary_join_element_wise(_text("{"), body, _text("}"), _text(""))
    return text.cast(pa.large_binary())


def _text(literal: str) -> pa.Scalar:
    return pa.scalar(literal, pa.large_string())


def _render(values: pa.Array) -> pa.Array | None:
    kind = values.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(values, pa.large_string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if pc.any(pc.match_substring_regex(values, OTHER_CONTROL)).as_py():
            return None
        text = pc.cast(values, pa.large_string())
        for raw, escaped in SHORT_ESCAPES:
            text = pc.replace_substring(text, raw, escaped)
        return pc.binary_join_element_wise(_text('"'), text, _text('"'), _text(""))
    return None


__all__ = ["json_objects"]
