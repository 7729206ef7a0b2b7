"""Consumer groups in the lakehouse: committed positions, members under leases, fenced commits."""

from compactor.groups.membership import Heartbeat, Membership, new_member_id, wanted_partitions
from compactor.groups.model import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupSummary,
    MemberState,
    PartitionState,
    Reset,
    TopicPartition,
)
from compactor.groups.store import GroupStore, check_group_name, offsets_retention_ms

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS", "DEFAULT_OFFSETS_RETENTION_MS", "DEFAULT_SESSION_TIMEOUT_MS", "GroupStore",
    "GroupSummary", "Heartbeat", "MemberState", "Membership", "PartitionState", "Reset", "TopicPartition",
    "check_group_name", "new_member_id", "offsets_retention_ms", "wanted_partitions",
]
