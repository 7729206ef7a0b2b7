"""The compacted table ``ns.t__compacted`` (columns: ``schema.COMPACTED_SCHEMA``), created on first use.

Partitioned by ``identity(partition)`` like the topic, so Spark joins the view with the raw range partition
by partition without a shuffle. Merge-on-read: an incremental run writes position deletes for superseded rows
and appends the new rows; nothing else of the view is rewritten. No Iceberg sort order is declared (it would
make Spark sort full rows before every write); the job sorts each partition's rows by offset itself.
"""

from __future__ import annotations

import contextlib

from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.errors import CursorCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.properties import COMPACTED_OF_PROPERTY, COMPACTED_TABLE_PROPERTIES, TOPIC_UUID_PROPERTY
from compactor.topics.topic import Topic


def ensure_compacted_table(topic: Topic) -> Table:
    """Load the topic's compacted table, creating it on first use; check it belongs to this topic."""
    catalog = topic.catalog
    identifier = topic.name.compacted_identifier
    topic_uuid = str(topic.table.metadata.table_uuid)
    with translate_storage_errors(f"opening the compacted view of {topic.name}"):
        try:
            table: Table = catalog.load_table(identifier)
        except NoSuchTableError:
            location = topic.table.metadata.location.rstrip("/") + "-compacted"
            with contextlib.suppress(TableAlreadyExistsError):
                catalog.create_table(
                    identifier,
                    schema=ts.COMPACTED_SCHEMA,
                    location=location,
                    partition_spec=ts.TOPIC_PARTITION_SPEC,
                    properties={**COMPACTED_TABLE_PROPERTIES, COMPACTED_OF_PROPERTY: topic.name.identifier,
                                TOPIC_UUID_PROPERTY: topic_uuid},
                )
            table = catalog.load_table(identifier)
    check_belongs(table, topic_uuid, identifier)
    return table


def check_belongs(table: Table, topic_uuid: str, identifier: str) -> None:
    owner = table.metadata.properties.get(TOPIC_UUID_PROPERTY)
    if owner != topic_uuid:
        raise CursorCorruptError(
            f"{identifier} does not belong to this topic (it was made for topic table {owner}, "
            f"this topic is {topic_uuid}); drop it to start compaction afresh")
