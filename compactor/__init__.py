"""Pulsar-style two-phase topic compaction on Apache Iceberg.

The public names are importable from here (docs/reference.md#the-python-api); they load lazily (PEP 562), so that
``import compactor.errors`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactor.lazy import lazy_attributes

if TYPE_CHECKING:  # the real types for type checkers; at run time each loads on first use
    from compactor.attach.api import attach_table, compact_attached, detach_table, read_attached
    from compactor.compaction.job import TwoPhaseCompactor
    from compactor.consumer.consumer import Consumer
    from compactor.consumer.increments import Increment, consume_dataframes, read_increment, topic_sink
    from compactor.consumer.positions import OffsetAndTimestamp
    from compactor.consumer.rebalance import ConsumerRebalanceListener
    from compactor.groups.model import TopicPartition
    from compactor.lake import Lake
    from compactor.mirror import Mirror, MirrorSummary, mirror_topics
    from compactor.producing.buffered import Producer
    from compactor.producing.dataframe import produce_dataframe
    from compactor.producing.producer import produce, produce_arrow
    from compactor.retention.run import run_retention
    from compactor.topics.records import ProducerRecord

_LAZY = {
    "Lake": "compactor.lake",
    "ProducerRecord": "compactor.topics.records",
    "produce": "compactor.producing.producer",
    "produce_arrow": "compactor.producing.producer",
    "produce_dataframe": "compactor.producing.dataframe",
    "Producer": "compactor.producing.buffered",
    "Consumer": "compactor.consumer.consumer",
    "ConsumerRebalanceListener": "compactor.consumer.rebalance",
    "OffsetAndTimestamp": "compactor.consumer.positions",
    "TopicPartition": "compactor.groups.model",
    "Increment": "compactor.consumer.increments",
    "read_increment": "compactor.consumer.increments",
    "consume_dataframes": "compactor.consumer.increments",
    "topic_sink": "compactor.consumer.increments",
    "TwoPhaseCompactor": "compactor.compaction.job",
    "run_retention": "compactor.retention.run",
    "Mirror": "compactor.mirror",
    "attach_table": "compactor.attach.api",
    "detach_table": "compactor.attach.api",
    "compact_attached": "compactor.attach.api",
    "read_attached": "compactor.attach.api",
    "MirrorSummary": "compactor.mirror",
    "mirror_topics": "compactor.mirror",
}

__all__ = ["Consumer", "ConsumerRebalanceListener", "Increment", "Lake", "Mirror", "MirrorSummary",
           "OffsetAndTimestamp", "Producer", "ProducerRecord", "TopicPartition", "TwoPhaseCompactor",
           "attach_table", "compact_attached", "consume_dataframes", "detach_table", "mirror_topics", "produce",
           "produce_arrow", "produce_dataframe", "read_attached", "read_increment", "run_retention", "topic_sink"]


__getattr__ = lazy_attributes(__name__, _LAZY)
