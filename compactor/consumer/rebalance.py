"""The rebalance listener (Kafka's ``ConsumerRebalanceListener``), called in the thread that polls.

``on_partitions_revoked(partitions)`` runs before partitions go to another member: the consumer still owns
them, so the caller may commit what it processed. ``on_partitions_lost(partitions)`` runs when they were already
taken (a lapsed lease, ``group reset --force``): a commit would be refused; a listener without it has
``on_partitions_revoked`` called instead, as Kafka does. ``on_partitions_assigned(partitions)`` runs once new
partitions are owned, before any of their records are returned.
"""

from __future__ import annotations

from typing import Protocol

from compactor.groups import TopicPartition


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...


class ConsumerRebalanceListener:
    """A listener that does nothing; subclass it and override what you need."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        """Called before ``partitions`` are released (commit here)."""

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        """Called once ``partitions`` are owned."""

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        """Called when ``partitions`` were lost without a chance to commit; by default ``on_partitions_revoked``."""
        self.on_partitions_revoked(partitions)


def notify(listener: RebalanceListener | None, event: str, partitions: list[TopicPartition]) -> None:
    """Tell ``listener`` of ``event`` (``revoked``, ``lost`` or ``assigned``) for ``partitions`` (sorted)."""
    if listener is None or not partitions:
        return
    chosen = sorted(partitions)
    if event == "lost":
        lost = getattr(listener, "on_partitions_lost", None)
        (lost or listener.on_partitions_revoked)(chosen)
    elif event == "revoked":
        listener.on_partitions_revoked(chosen)
    else:
        listener.on_partitions_assigned(chosen)
