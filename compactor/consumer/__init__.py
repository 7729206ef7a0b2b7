"""Consumers: follow topics for a group (or a static assignment), compacted or raw (SEMANTICS section 7)."""

from compactor.consumer.consumer import Consumer
from compactor.groups import TopicPartition

__all__ = ["Consumer", "TopicPartition"]
