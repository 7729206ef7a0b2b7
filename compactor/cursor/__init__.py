"""The compaction cursor (Pulsar's ``__compaction`` cursor): the contract between compaction, readers,
retention and status.

* ``model``: what a cursor is (``Cursor``) and how it is encoded in a snapshot summary.
* ``stats``: the figures it carries (``ViewStats`` of its rows, ``CompactionStats`` of the run).
* ``store``: loading the compacted table, its current cursor and the chain of retained cursors.
* ``table``: the compacted table itself (created on first use, checked to belong to its topic).
"""

from compactor.cursor.model import MAIN, TAG_PREFIX, Cursor, cursor_properties, cursor_tag, parse_cursor, tagged_cursor
from compactor.cursor.stats import CompactionStats, ViewStats
from compactor.cursor.store import CompactedState, cursor_chain, load_compacted, retained_cursors

__all__ = ["MAIN", "TAG_PREFIX", "CompactedState", "CompactionStats", "Cursor", "ViewStats", "cursor_chain",
           "cursor_properties", "cursor_tag", "load_compacted", "parse_cursor", "retained_cursors", "tagged_cursor"]
