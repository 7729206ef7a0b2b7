"""Consumers: follow topics for a group (or a static assignment), compacted or raw
(docs/guarantees.md#consumers-and-groups)."""

from compactor.consumer.consumer import Consumer
from compactor.groups import TopicPartition

__all__ = ["Consumer", "TopicPartition"]
