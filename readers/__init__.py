"""Reading topics: the compacted view (compacted rows, then the raw tail past the horizon) or the raw log.
Attached logs are read by the same names (``readers.attached``).

The public names load lazily (PEP 562), so ``import readers`` does not import pyarrow, pyiceberg or pyspark
until one of them is used. Deeper import paths are internal and may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactor.lazy import lazy_attributes

if TYPE_CHECKING:  # the real types for type checkers; at run time they load on first use
    from readers.positions import StartPosition
    from readers.reader import TopicReader
    from readers.spark import read_topic_dataframe
    from readers.table_view import TableView

_LAZY = {
    "TopicReader": "readers.reader",
    "read_topic_dataframe": "readers.spark",
    "TableView": "readers.table_view",
    "StartPosition": "readers.positions",
}

__all__ = ["StartPosition", "TableView", "TopicReader", "read_topic_dataframe"]


__getattr__ = lazy_attributes(__name__, _LAZY)
