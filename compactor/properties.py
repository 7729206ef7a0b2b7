"""Every key the product writes into Iceberg metadata, in one place.

Table properties carry a topic's durable state (its marker, partition count, next and log start offsets) in
the same commit as the data they describe; snapshot-summary properties record, on each commit, what made it
(the operation, the command's clock, the batch, the cursor). Topic *settings* are table properties too, named
``compactor.<kafka-name>`` by ``topics.settings``; they are not listed here. Everything named here is
reserved: ``topic config`` cannot set it.
"""

from __future__ import annotations

# --- table properties of a topic (the raw table) -------------------------------------------------
MARKER_PROPERTY = "compactor.topic"
MARKER_VALUE = "v1"
PARTITIONS_PROPERTY = "compactor.partitions"
NEXT_OFFSETS_PROPERTY = "compactor.next-offsets"
LOG_START_OFFSETS_PROPERTY = "compactor.log-start-offsets"
# Cumulative logical bytes (key + value + headers) of offsets [0, N_p) per partition: dirty bytes from metadata.
LOGICAL_BYTES_PROPERTY = "compactor.logical-bytes"
# Cumulative logical bytes below each partition's log start (recorded by retention).
LOG_START_BYTES_PROPERTY = "compactor.log-start-bytes"
# The last published cursor, mirrored for people and tools (nothing trusts it).
CURSOR_MIRROR_PROPERTY = "compactor.compaction-cursor"
# When retention first saw the policy without 'compact' (the compacted view is dropped a lease later).
COMPACT_OFF_SINCE_PROPERTY = "compactor.compact-off-since-ms"
# The durable record of committed batch ids (idempotent producing): recent entries inline, older ones in segment
# files it lists (producing.batch_ids). Changes in the same commit as each append.
BATCH_IDS_PROPERTY = "compactor.batch-ids"
# A mirrored topic (docs/guarantees.md#mirrors): its Kafka source, and what the mirror recorded with its last commit
# (the source's log end it saw, the offsets it skipped). Its presence means the topic's offsets are its source's: they
# may have gaps. Changes in the same commit as the mirror's appends (topics.mirrored).
MIRROR_PROPERTY = "compactor.mirror"
# An attached log (docs/guarantees.md#attached-logs): on the product's view table of a source another tool
# writes, the mapping of the source's columns (compactor.attach). Its presence makes the table a topic for
# ``topic list``.
ATTACHED_PROPERTY = "compactor.attached"

# Iceberg properties every topic carries. Retries are off because a blind re-commit of files written with
# offsets computed from an older snapshot would duplicate offsets; the producer retries itself instead.
# Row groups of at most 128k rows keep a large batch's file splittable: Spark reads a file's row groups in
# parallel tasks (compaction's sliced layout splits a partition's range at row-group boundaries).
TOPIC_TABLE_PROPERTIES = {
    "format-version": "2",
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "zstd",
    "write.parquet.row-group-limit": "131072",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    "write.distribution-mode": "none",
}

# --- table properties of the compacted table ----------------------------------------------------------
COMPACTED_OF_PROPERTY = "compactor.compacted-of"
TOPIC_UUID_PROPERTY = "compactor.topic-uuid"
COMPACTED_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.row-group-size-bytes": str(32 * 1024 * 1024),  # splittable files (see the topic's)
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}

# --- snapshot summary properties, on every commit the product makes ----------------------------------------
SUMMARY_OPERATION = "compactor.operation"   # produce, retention, ...
SUMMARY_NOW = "compactor.now-ms"            # the command's clock: expiry ages use it, never commit times
SUMMARY_BATCH_ID = "compactor.batch-id"     # the producer's idempotence key
SUMMARY_BASE = "compactor.base"             # the empty snapshot first compaction runs branch from

# --- snapshot summary properties of a cursor (docs/guarantees.md#the-cursor-and-failures) ----------------
CURSOR_MARKER = "compactor.cursor"
CURSOR_VERSION = "v1"
CURSOR_HORIZONS = "compactor.horizons"
CURSOR_COMPACTED_START = "compactor.compacted-start"
CURSOR_RAW_SNAPSHOT = "compactor.raw-snapshot-id"
CURSOR_RAW_NEXT_OFFSETS = "compactor.raw-next-offsets"
CURSOR_BYTES_AT_HORIZON = "compactor.bytes-at-horizon"
CURSOR_NOW = SUMMARY_NOW
CURSOR_SETTINGS = "compactor.settings"
CURSOR_STATS = "compactor.stats"
CURSOR_VIEW = "compactor.view"
CURSOR_PREVIOUS = "compactor.previous-cursor"
CURSOR_RUN_ID = "compactor.run-id"
CURSOR_POLICY_COMPACT = "compactor.policy-compact"
