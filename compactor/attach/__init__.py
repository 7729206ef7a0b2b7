"""Attached logs: append-only Iceberg tables that other tools write (Kafka Connect's Iceberg sink, Redpanda's
Iceberg topics, ...), compacted without ever being written to (docs/guarantees.md#attached-logs).

``registry`` (attach, detach, the mapping's home), ``mapping`` (layouts and their columns), ``compaction`` (the
Spark run), ``reading`` (``read_attached``, on Spark), ``records`` and ``log`` (records, offsets and the topic
handle the readers and consumers use, without Spark: ``readers.attached``), ``status`` (``status``,
``topic describe``, ``retention``).
"""

from compactor.attach.mapping import LAYOUTS, AttachError, Mapping
from compactor.attach.registry import AttachedLog, attach_table, detach_table, is_attached, load_attached

__all__ = ["LAYOUTS", "AttachError", "AttachedLog", "Mapping", "attach_table", "detach_table", "is_attached",
           "load_attached"]
