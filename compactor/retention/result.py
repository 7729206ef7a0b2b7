"""What a retention pass removed (or would remove, in a dry run), as printed by ``compactor retention``.

``RetentionResult`` holds the docs/reference.md totals first, then one typed part per step of the pass (the raw
prefix removal per partition, the compacted trim, the policy-off drop, expiry of both tables), each under the
JSON name it has always been printed with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compactor.results import JsonResult
from compactor.retention.expiry import ExpiryResult


@dataclass
class RawRemoval(JsonResult):
    """The prefix of one partition's raw files that the pass removed."""

    files: int
    records: int
    bytes: int
    log_start: int
    new_log_start: int
    reason: str


@dataclass
class PolicyStep(JsonResult):
    """A retention step that applies only under some policies: whether it applied, and why it did what it did."""

    applies: bool
    reason: str = ""


@dataclass
class CompactedTrim(PolicyStep):
    """Step 2 under ``delete,compact``: compacted rows older than ``retention.ms`` removed by a new cursor."""

    committed: bool = False
    trim_before_ms: int | None = None
    compacted_snapshot_id: int | None = None
    rows_removed: int = 0


@dataclass
class PolicyOff(PolicyStep):
    """Step 3: the compacted view of a topic whose policy lacks ``compact``, dropped once the lease has passed."""

    dropped: bool = False
    policy_off_since_ms: int | None = None
    drop_at_ms: int | None = None
    would_drop: bool = False
    deleted_files: int = 0


@dataclass
class Expiry(JsonResult):
    """Step 4: snapshot expiry of the raw and the compacted table."""

    raw: ExpiryResult = field(default_factory=ExpiryResult)
    compacted: ExpiryResult = field(default_factory=ExpiryResult)


@dataclass
class RetentionResult(JsonResult):
    """Totals of one retention pass over one topic (docs/reference.md#json-results ``retention`` fields), then each
    step's part."""

    topic: str
    dry_run: bool
    now_ms: int
    removed_records: int = 0
    removed_files: int = 0
    removed_bytes: int = 0
    expired_snapshots: int = 0
    log_start_offsets: dict[str, int] = field(default_factory=dict)
    policy: str = ""
    retained_cursors: list[int] = field(default_factory=list)
    raw: dict[str, RawRemoval] = field(default_factory=dict)  # partition -> its removal (partitions that lost files)
    compacted_trim: CompactedTrim = field(default_factory=lambda: CompactedTrim(applies=False))
    policy_off: PolicyOff = field(default_factory=lambda: PolicyOff(applies=False))
    expiry: Expiry = field(default_factory=Expiry)
    dropped_run_tables: list[str] = field(default_factory=list)  # phase-1 tables of compaction runs that died
    deleted_files: int = 0  # files physically deleted by expiry of both tables (orphans included)
    deleted_bytes: int = 0
    duration_ms: int = 0
