"""The phase-1 scratch table: where a run keeps its winners between phase 1 and phase 2.

Phase 1 writes, for each partition of the new range, the winners' offsets as one 64-bit mask per 64
consecutive offsets (``word`` = offset >> 6) and, when a compacted view exists, the winning keys. Phase 2 reads
them back through storage-partitioned joins: the scratch table is partitioned by ``identity(partition)`` like
the topic and the view. So phase 1 is a step of its own (timed, with a failure point after it), and nothing
key- or record-sized ever reaches the driver.

Its layout is ``schema.SCRATCH_SCHEMA`` (``schema.CONTEST_SCHEMA`` when phase 1 contests the view's rows). The
table is ``<namespace>.<topic>__compacted__run_<now>_<id>`` (``scratch_identifier``), placed under the compacted
table's location, and dropped with its files when the run ends, whatever the outcome. A run that died leaves one
behind; the next run of the topic (and retention) drops scratch tables older than
``compaction.orphan-min-age-ms``, never one whose run still holds its lease (``lease.is_stale``).
"""

from __future__ import annotations

import functools
import logging

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.table import Table

from compactor.compaction.lease import LiveRuns, RunMark, is_stale, live_runs
from compactor.config import LakeConfig
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_prefix, drop_stale_tables
from compactor.schema import COMPACTED_SUFFIX, CONTEST_SCHEMA, SCRATCH_SCHEMA, TOPIC_PARTITION_SPEC
from compactor.topics.naming import TopicName

log = logging.getLogger(__name__)

SCRATCH_INFIX = f"{COMPACTED_SUFFIX}__run_"
SCRATCH_PROPERTIES = {"format-version": "2", "write.distribution-mode": "none",
                      "write.parquet.compression-codec": "zstd"}


def scratch_identifier(name: TopicName, now_ms: int, run_id: str) -> str:
    """The catalog identifier of the scratch table of the run ``run_id`` of ``name`` started at ``now_ms``."""
    return ".".join((*name.namespace, RunMark(now_ms, run_id).name(f"{name.topic}{SCRATCH_INFIX}", "_")))


def scratch_mark(identifier: str) -> RunMark | None:
    """The run clock and run id a scratch table's name records."""
    return RunMark.parse(identifier, SCRATCH_INFIX, "_")


def scratch_location(view_location: str, now_ms: int, run_id: str) -> str:
    """Where the run ``run_id`` started at ``now_ms`` keeps its phase-1 files: its scratch table's location, below
    the compacted table's (orphan-file removal takes what a run that died left there)."""
    return f"{view_location.rstrip('/')}/scratch/{now_ms}_{run_id}"


def create_scratch(catalog: Catalog, name: TopicName, view_location: str, now_ms: int, run_id: str, *,
                   contest: bool = False) -> str:
    """Create the run's scratch table (empty; ``contest``: with the superseded rows' columns); returns its
    identifier."""
    identifier = scratch_identifier(name, now_ms, run_id)
    location = scratch_location(view_location, now_ms, run_id)
    with translate_storage_errors(f"creating the phase-1 table of {name}"):
        catalog.create_table(identifier, schema=CONTEST_SCHEMA if contest else SCRATCH_SCHEMA, location=location,
                             partition_spec=TOPIC_PARTITION_SPEC, properties=SCRATCH_PROPERTIES)
    return identifier


def drop_scratch(catalog: Catalog, config: LakeConfig, identifier: str) -> None:
    """Drop a scratch table and delete its files (best effort: a leftover is dropped by a later run)."""
    try:
        table = catalog.load_table(identifier)
        location = table.metadata.location
        catalog.drop_table(identifier)
        delete_prefix(config, location, table.io)
    except NoSuchTableError:
        return
    except Exception as exc:
        log.info("phase-1 table %s left for a later run to drop: %s", identifier, exc)


def drop_stale_scratch(catalog: Catalog, config: LakeConfig, name: TopicName, now_ms: int, min_age_ms: int, *,
                       view_location: str, dry_run: bool = False, view_io: FileIO | None = None) -> list[str]:
    """Drop the scratch tables of ``name`` whose runs started more than ``min_age_ms`` before ``now_ms`` (a run
    that died left them), never those of a run with a live lease under ``view_location``; returns their
    identifiers (in a dry run, those it would drop). The leases are read after the tables were listed: a run
    writes its lease before it creates its table, so every table listed has a lease to be found."""
    @functools.cache
    def live() -> LiveRuns:  # read once, at the first table listed
        return live_runs(config, view_location, io=view_io)

    def stale(identifier: str, _: Table) -> bool:
        return is_stale(scratch_mark(identifier), live(), now_ms, min_age_ms)

    return drop_stale_tables(catalog, config, name.namespace, f"{name.topic}{SCRATCH_INFIX}", stale, "phase-1 table",
                             dry_run=dry_run)
