"""What a consumer reads with: per topic, one pinned read from its positions, and a cheap watch for changes.

* **A fetch** (``TopicFetch``) is one pinned ``TopicReader`` (docs/guarantees.md#readers) of a topic, whose partitions
  stream on their own (``readers.streams``) from the consumer's positions to the pinned ends: Pulsar's
  readCompacted rule is the reader's (compacted rows at or after the position below ``H_p``, then raw rows).
* **The watch.** A topic whose owned partitions are all read to their pinned ends is loaded again through the
  catalog (``Catalog.load_table``, public API on any catalog; the lake's SQL catalog answers an unchanged table
  with one query, no metadata parse). Nothing more is read while its metadata location stays the same, and a
  change to partitions the consumer does not own (an append elsewhere, a compaction, retention) only updates
  the location: the fetch is re-opened only when an owned partition's log end moved past its position.
* **Planning** a re-opened fetch reads only the manifests added since the last one (``readers.planning``), so
  the cost of waiting does not grow with the topic's files.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from compactor.attach.log import AttachedTopic
from compactor.attach.registry import AttachedLog, is_attached, require_attached
from compactor.iceberg.catalog import load_table
from compactor.topics.naming import TopicName
from compactor.topics.state import PartitionOffsets, read_offsets
from readers.pinned import Pins
from readers.planning import RawPlanner
from readers.reader import TopicReader
from readers.streams import PartitionStream

if TYPE_CHECKING:
    from compactor.lake import Lake

READ_AHEAD = 4  # files read ahead at once for all of a consumer's partitions (``TopicReader``'s window too)


@dataclass
class TopicFetch:
    """One pinned read of a topic (see the module docstring)."""

    reader: TopicReader
    location: str  # the raw table's metadata location it was opened on (or last found unchanged for us)
    streams: dict[int, PartitionStream] = field(default_factory=dict)

    def end(self, partition: int) -> int:
        return self.reader.pinned.end[partition]


class Fetcher:
    """The watch, the incremental planners and the read-ahead pool of one consumer."""

    def __init__(self, lake: Lake, read_compacted: bool) -> None:
        self.lake = lake
        self.read_compacted = read_compacted
        self.planners: dict[str, RawPlanner] = {}
        self.attached: dict[str, AttachedLog] = {}  # the attached logs among the topics loaded
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.loads = 0  # catalog loads of the raw tables (what an idle consumer costs)
        self.opens = 0  # fetches opened

    def load(self, name: TopicName) -> Table:
        """The topic's raw table as the catalog has it now (an attached log's: its source table)."""
        self.loads += 1
        table = load_table(self.lake.catalog, name.identifier)
        if not is_attached(table):
            return table
        attached = self.attached[str(name)] = require_attached(self.lake.catalog, name)
        return attached.source()

    def offsets(self, name: TopicName, table: Table) -> PartitionOffsets:
        """``N_p`` and ``LSO_p`` of the raw table ``load`` returned (of an attached log: read from its source)."""
        attached = self.attached.get(str(name))
        if attached is None:
            return read_offsets(table.metadata.properties)
        return AttachedTopic(attached, table).offsets()

    def open(self, name: TopicName, table: Table, partitions: list[int]) -> TopicReader:
        """A reader pinned on ``table`` (its current snapshot, planned incrementally for ``partitions``)."""
        if str(name) in self.attached:  # an attached log plans each read (readers.attached)
            self.opens += 1
            return TopicReader(self.lake, name, read_compacted=self.read_compacted, pins=Pins(table=table))
        planner = self.planners.setdefault(str(name), RawPlanner())
        snapshot = table.current_snapshot()
        index = planner.plan(table, snapshot.snapshot_id if snapshot else None, partitions)
        self.opens += 1
        return TopicReader(self.lake, name, read_compacted=self.read_compacted,
                           pins=Pins(table=table, raw_index=index))

    def stream(self, fetch: TopicFetch, partition: int, start: int, partitions: int) -> PartitionStream:
        """The stream of ``partition`` from ``start``, with its share of the read-ahead (of ``partitions``)."""
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="fetch")
        stream = PartitionStream(fetch.reader, partition, start, self.pool, max(1, READ_AHEAD // max(1, partitions)))
        fetch.streams[partition] = stream
        return stream

    def manifest_entries_read(self) -> int:
        """Entries of manifests read to plan fetches so far (what planning cost)."""
        return sum(p.entries_read for p in self.planners.values())

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
