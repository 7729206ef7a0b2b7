"""``Lake``: one warehouse and its catalog, the entry point of the Python API.

A ``Lake`` opens the pyiceberg catalog on first use and starts Spark only when a Spark job asks for it, so
the verbs that need no Spark (topic administration, produce, read, status) never start a JVM. Opening a lake
never creates one: only ``create_topic`` (and ``open(create=True)``) may, and says so on standard error; every
other use of a warehouse or catalog that does not exist is a ``LakeNotFoundError`` naming them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

from compactor import properties as props
from compactor import schema as ts
from compactor.config import LakeConfig
from compactor.errors import InputError, TopicExistsError, TopicNotFoundError
from compactor.iceberg.catalog import load_table, open_catalog, translate_storage_errors
from compactor.iceberg.storage import delete_prefix
from compactor.results import JsonResult
from compactor.topics.naming import TopicName
from compactor.topics.settings import validate_updates
from compactor.topics.state import encode_offsets
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class DeletedTopic(JsonResult):
    """What ``topic delete`` did."""

    topic: str
    deleted: bool
    removed_files: int


class Lake:
    """A connection to one Iceberg warehouse and catalog."""

    def __init__(self, config: LakeConfig | None = None, *, warehouse: str | None = None,
                 catalog_uri: str | None = None, group_store: str | None = None) -> None:
        self.config = config or LakeConfig.resolve(warehouse=warehouse, catalog_uri=catalog_uri,
                                                   group_store=group_store)
        if config is not None and group_store is not None:
            self.config = dataclasses.replace(config, group_store=group_store)
        self._catalog: Catalog | None = None
        self._spark: SparkSession | None = None
        self._job_spark: SparkSession | None = None

    # --- engines ----------------------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        """The lake's pyiceberg catalog (opened on first use; ``LakeNotFoundError`` if there is no lake)."""
        return self.open()

    def open(self, *, create: bool = False) -> Catalog:
        """Open the lake's catalog; ``create`` makes a new lake where there is none (logged as a warning)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.config, create=create)
        return self._catalog

    def describe(self) -> str:
        """Where this lake is (catalog and warehouse), for messages; no secret."""
        return self.config.describe()

    def spark(self) -> SparkSession:
        """The SparkSession for this lake (started on first use; reused afterwards)."""
        if self._spark is None:
            from compactor.spark.session import get_or_create_session

            self.catalog  # noqa: B018 - the catalog (and a local warehouse directory) exists before Spark's opens it
            self._spark = get_or_create_session(self.config)
        return self._spark

    def attach_spark(self, spark: SparkSession) -> None:
        """Use an existing SparkSession (configured for this lake) instead of starting one."""
        self._spark = spark
        self._job_spark = None

    def job_spark(self) -> SparkSession:
        """A private session on the same Spark application for the product's own jobs (``newSession``: its
        own SQL settings, the same executors), so the settings a job needs never reach the caller's session."""
        if self._job_spark is None:
            from compactor.spark.session import private_session

            self._job_spark = private_session(self.spark(), self.config)
        return self._job_spark

    # --- topics -------------------------------------------------------------------------------------

    def topic(self, name: str | TopicName) -> Topic:
        """Open an existing topic; ``TopicNotFoundError`` / ``NotATopicError`` otherwise."""
        topic_name = name if isinstance(name, TopicName) else TopicName.parse(name)
        try:
            table = load_table(self.catalog, topic_name.identifier)
        except TopicNotFoundError:
            raise self._unknown(topic_name) from None
        return Topic(self.catalog, topic_name, table)

    def _unknown(self, name: TopicName) -> TopicNotFoundError:
        return TopicNotFoundError(f"unknown topic '{name}' (searched {self.describe()})")

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> Topic:
        """Create a topic (and its namespace if needed). Settings are validated before anything is made."""
        topic_name = TopicName.parse(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InputError(f"--partitions must be an integer between 1 and {MAX_PARTITIONS}, got {partitions!r}")
        to_set, _, _ = validate_updates({}, dict(config or {}))
        catalog = self.open(create=True)
        properties = {
            **props.TOPIC_TABLE_PROPERTIES,
            **to_set,
            props.MARKER_PROPERTY: props.MARKER_VALUE,
            props.PARTITIONS_PROPERTY: str(partitions),
            props.NEXT_OFFSETS_PROPERTY: encode_offsets([0] * partitions),
            props.LOG_START_OFFSETS_PROPERTY: encode_offsets([0] * partitions),
            props.LOGICAL_BYTES_PROPERTY: encode_offsets([0] * partitions),
        }
        with translate_storage_errors(f"creating topic {topic_name}"):
            with contextlib.suppress(NamespaceAlreadyExistsError):
                catalog.create_namespace(topic_name.namespace)
            if catalog.table_exists(topic_name.compacted_identifier):
                raise TopicExistsError(f"topic '{topic_name}' cannot be created: its compacted table "
                                       f"'{topic_name.compacted_identifier}' already exists")
            location = self._new_location(topic_name)
            try:
                table = catalog.create_table(
                    topic_name.identifier,
                    schema=ts.TOPIC_SCHEMA,
                    location=location,
                    partition_spec=ts.TOPIC_PARTITION_SPEC,
                    sort_order=ts.TOPIC_SORT_ORDER,
                    properties=properties,
                )
            except TableAlreadyExistsError:
                raise TopicExistsError(f"topic '{topic_name}' already exists") from None
        return Topic(catalog, topic_name, table)

    def _new_location(self, name: TopicName) -> str | None:
        """A fresh table location per topic incarnation, so a re-created topic never sees old files; None (the
        catalog's choice) on a REST catalog given no warehouse location."""
        if not self.config.warehouse:
            return None
        base = self.config.warehouse.rstrip("/")
        return f"{base}/{'/'.join(name.namespace)}/{name.topic}-{uuid.uuid4().hex[:12]}"

    def list_topics(self, *, attached: bool | None = False) -> list[str]:
        """Names of every table in the catalog that carries the topic marker, sorted; ``attached=True``: the
        attached logs instead (docs/guarantees.md#attached-logs), ``None``: both."""
        topics, attached_logs = self.list_logs()
        if attached is None:
            return sorted(topics + attached_logs)
        return attached_logs if attached else topics

    def list_logs(self) -> tuple[list[str], list[str]]:
        """The topics and the attached logs, each sorted, from one walk of the catalog (each table loaded once)."""
        topics: list[str] = []
        attached_logs: list[str] = []
        with translate_storage_errors("listing topics"):
            for namespace in self._all_namespaces():
                for identifier in self.catalog.list_tables(namespace):
                    full = ".".join(identifier)
                    if identifier[-1].endswith(ts.COMPACTED_SUFFIX):
                        continue
                    try:
                        table = self.catalog.load_table(full)
                    except NoSuchTableError:
                        continue  # dropped while we listed
                    if table.metadata.properties.get(props.MARKER_PROPERTY) == props.MARKER_VALUE:
                        topics.append(full)
                    elif props.ATTACHED_PROPERTY in table.metadata.properties:
                        attached_logs.append(full)
        return sorted(topics), sorted(attached_logs)

    def _all_namespaces(self) -> list[tuple[str, ...]]:
        pending: list[tuple[str, ...]] = [tuple(ns) for ns in self.catalog.list_namespaces()]
        seen: list[tuple[str, ...]] = []
        while pending:
            namespace = pending.pop()
            if namespace in seen:
                continue
            seen.append(namespace)
            with contextlib.suppress(NoSuchNamespaceError, NotImplementedError):
                pending.extend(tuple(ns) for ns in self.catalog.list_namespaces(namespace) if tuple(ns) != namespace)
        return sorted(seen)

    def delete_topic(self, name: str) -> DeletedTopic:
        """Drop a topic, its compacted view, and every file under their locations."""
        topic = self.topic(name)  # validates it is a topic
        locations = [(topic.table.metadata.location, topic.table.io)]
        removed_files = 0
        with translate_storage_errors(f"deleting topic {topic.name}"):
            try:
                compacted = self.catalog.load_table(topic.name.compacted_identifier)
                locations.append((compacted.metadata.location, compacted.io))
                self.catalog.drop_table(topic.name.compacted_identifier)
            except NoSuchTableError:
                pass
            try:
                self.catalog.drop_table(topic.name.identifier)
            except NoSuchTableError:
                raise self._unknown(topic.name) from None
            for location, io in locations:  # each table's own file IO: a REST catalog's vended credentials
                removed_files += delete_prefix(self.config, location, io)
        return DeletedTopic(str(topic.name), True, removed_files)

    def close(self) -> None:
        if self._catalog is not None:
            with contextlib.suppress(Exception):
                self._catalog.close()
            self._catalog = None
