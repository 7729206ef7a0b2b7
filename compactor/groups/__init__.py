"""Consumer groups in the lakehouse: committed positions, members under leases, fenced commits, in a group
store of its own (a database or an object store) whatever the Iceberg catalog is."""

from compactor.groups.membership import Membership, new_member_id
from compactor.groups.model import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupSummary,
    MemberState,
    PartitionState,
    PendingRange,
    Reset,
    TopicPartition,
)
from compactor.groups.rules import Beat
from compactor.groups.store import GroupStore, check_group_name, offsets_retention_ms

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS", "DEFAULT_MAX_POLL_INTERVAL_MS", "DEFAULT_OFFSETS_RETENTION_MS",
    "DEFAULT_SESSION_TIMEOUT_MS", "Beat", "GroupStore", "GroupSummary", "MemberState", "Membership",
    "PartitionState", "PendingRange", "Reset", "TopicPartition", "check_group_name", "new_member_id",
    "offsets_retention_ms",
]
