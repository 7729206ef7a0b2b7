"""Attaching and detaching: the registration of an attached log lives in the product's own view table.

``topic attach NS.NAME --table SRC ...`` creates one table, ``NS.NAME``: the compacted view of the source. Its
schema is the source's (every field optional, so any source row fits) plus the product's bookkeeping columns
(``_compactor_partition``, ``_compactor_offset``, ``_compactor_timestamp_ms``, ``_compactor_tombstone``,
``_compactor_delete_horizon_ms``); its table properties hold the mapping (``compactor.attached``), the source
table's UUID (a source dropped and re-created under the same name is refused) and the topic's settings. The
cursor is the summary of the view's current snapshot (``attach.cursor``). The source table is only ever read.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping as AnyMapping
from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BooleanType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StructType,
)

from compactor import properties as props
from compactor.attach.condition import check_condition, readers_can_evaluate
from compactor.attach.mapping import AttachError, Mapping, build_mapping, check_mapping
from compactor.config import LakeConfig
from compactor.errors import NotATopicError, TopicExistsError, TopicNotFoundError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_prefix
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings, validate_updates

ATTACHED_PROPERTY = props.ATTACHED_PROPERTY
SOURCE_UUID_PROPERTY = "compactor.attached.source-uuid"

PARTITION = "_compactor_partition"
OFFSET = "_compactor_offset"
TIMESTAMP_MS = "_compactor_timestamp_ms"
TOMBSTONE = "_compactor_tombstone"
DELETE_HORIZON_MS = "_compactor_delete_horizon_ms"
BOOKKEEPING: tuple[tuple[str, IcebergType], ...] = (
    (PARTITION, IntegerType()), (OFFSET, LongType()), (TIMESTAMP_MS, LongType()), (TOMBSTONE, BooleanType()),
    (DELETE_HORIZON_MS, LongType()))

VIEW_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


@dataclass
class AttachedLog:
    """An attached log: its name, its view table (product-owned) and the mapping of its source."""

    name: TopicName
    view: Table
    mapping: Mapping
    catalog: Catalog

    @property
    def settings(self) -> TopicSettings:
        return TopicSettings.from_properties(self.view.metadata.properties)

    def source(self) -> Table:
        """The source table as it is now; an error if it is gone or was replaced by another table."""
        with translate_storage_errors(f"loading the source {self.mapping.source} of {self.name}"):
            try:
                table = self.catalog.load_table(self.mapping.source)
            except NoSuchTableError:
                raise TopicNotFoundError(f"the source table '{self.mapping.source}' of attached log '{self.name}' "
                                         "no longer exists; detach it with 'compactor topic detach'") from None
        expected = self.view.metadata.properties.get(SOURCE_UUID_PROPERTY)
        if expected and str(table.metadata.table_uuid) != expected:
            raise AttachError(f"the source table '{self.mapping.source}' of attached log '{self.name}' was replaced "
                              f"by another table (UUID {table.metadata.table_uuid}, attached {expected}); detach "
                              "and attach it again")
        return table

    def refresh(self) -> AttachedLog:
        with translate_storage_errors(f"loading {self.name}"):
            self.view = self.catalog.load_table(self.name.identifier)
        return self


def is_attached(table: Table) -> bool:
    return ATTACHED_PROPERTY in table.metadata.properties


def load_attached(catalog: Catalog, name: str | TopicName) -> AttachedLog | None:
    """The attached log named ``name``, or ``None`` if that table does not exist or is not an attached log."""
    topic = name if isinstance(name, TopicName) else TopicName.parse(name)
    with translate_storage_errors(f"loading {topic}"):
        try:
            table = catalog.load_table(topic.identifier)
        except NoSuchTableError:
            return None
    if not is_attached(table):
        return None
    return AttachedLog(topic, table, Mapping.from_json(table.metadata.properties[ATTACHED_PROPERTY]), catalog)


def require_attached(catalog: Catalog, name: str | TopicName) -> AttachedLog:
    """The attached log named ``name``; ``TopicNotFoundError`` if there is none."""
    attached = load_attached(catalog, name)
    if attached is None:
        raise TopicNotFoundError(f"'{name}' is not an attached log")
    return attached


def attach_table(catalog: Catalog, name: str, *, table: str, layout: str, partition_column: str | None = None,
                 offset_column: str | None = None, timestamp_column: str | None = None,
                 key_columns: Sequence[str] = (), tombstone_when: str | None = None,
                 config: AnyMapping[str, str] | None = None, location: str | None = None) -> AttachedLog:
    """Register ``table`` as the raw log of the attached log ``name``; everything is checked before the one
    table the product owns is created. The source is only read (its schema and UUID)."""
    topic = TopicName.parse(name)
    to_set, _, _ = validate_updates({}, dict(config or {}))
    with translate_storage_errors(f"loading the source table {table}"):
        try:
            source = catalog.load_table(table)
        except (NoSuchTableError, ValueError):
            raise TopicNotFoundError(f"cannot attach '{table}': no such table") from None
    if is_attached(source) or "compactor.topic" in source.metadata.properties:
        raise NotATopicError(f"cannot attach '{table}': it is one of the product's own tables")
    mapping = build_mapping(source.schema(), ".".join(source.name()), layout, partition=partition_column,
                            offset=offset_column, timestamp=timestamp_column, keys=key_columns,
                            tombstone=tombstone_when)
    if tombstone_when and tombstone_when.strip() != "null-value":
        check_predicate(mapping, source.schema())
    properties = {**VIEW_TABLE_PROPERTIES, **to_set, ATTACHED_PROPERTY: mapping.to_json(),
                  SOURCE_UUID_PROPERTY: str(source.metadata.table_uuid)}
    with translate_storage_errors(f"attaching {topic}"):
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(topic.namespace)
        try:
            view = catalog.create_table(topic.identifier, schema=view_schema(source.schema()), location=location,
                                        properties=properties)
        except TableAlreadyExistsError:
            raise TopicExistsError(f"topic '{topic}' already exists") from None
    return AttachedLog(topic, view, mapping, catalog)


def check_predicate(mapping: Mapping, schema: Schema) -> None:
    """Refuse a tombstone condition that is not one SQL condition, or that the readers could evaluate but that names
    a column the source lacks (or compares one with a literal of another type). Other Spark SQL conditions are
    kept: Spark resolves them at the first compaction run (``attach.frames.checked``)."""
    text = mapping.tombstone
    if not text or text.count("(") != text.count(")") or ";" in text:
        raise AttachError(f"--tombstone-when {text!r} is not one SQL condition")
    if readers_can_evaluate(text):
        check_condition(text, schema, mapping.source)


def detach_table(catalog: Catalog, config: LakeConfig, name: str) -> dict[str, object]:
    """Drop the view of an attached log and its registration, with every file under the view's location; the
    source is not touched."""
    attached = require_attached(catalog, name)
    location = attached.view.metadata.location
    with translate_storage_errors(f"detaching {attached.name}"):
        catalog.drop_table(attached.name.identifier)
        removed = delete_prefix(config, location, attached.view.io)
    return {"topic": str(attached.name), "detached": True, "source": attached.mapping.source,
            "removed_files": removed}


def view_schema(source: Schema) -> Schema:
    """The view's schema: the source's columns, all optional, then the bookkeeping columns."""
    counter = iter(range(1, 1_000_000))
    fields = [_optional(f, counter) for f in source.fields]
    fields += [NestedField(next(counter), name, kind, required=False) for name, kind in BOOKKEEPING]
    return Schema(*fields)


def source_part(view: Schema) -> Schema:
    """The view's schema without its bookkeeping columns (to compare with the source's)."""
    names = {name for name, _ in BOOKKEEPING}
    return Schema(*[f for f in view.fields if f.name not in names])


def _optional(field: NestedField, counter: object) -> NestedField:
    return NestedField(next(counter), field.name, _optional_type(field.field_type, counter),  # type: ignore[call-overload]
                       required=False, doc=field.doc)


def _optional_type(kind: IcebergType, counter: object) -> IcebergType:
    if isinstance(kind, StructType):
        return StructType(*[_optional(f, counter) for f in kind.fields])
    if isinstance(kind, ListType):
        return ListType(next(counter), _optional_type(kind.element_type, counter),  # type: ignore[call-overload]
                        element_required=False)
    if isinstance(kind, MapType):
        key_id = next(counter)  # type: ignore[call-overload]
        return MapType(key_id, _optional_type(kind.key_type, counter), next(counter),  # type: ignore[call-overload]
                       _optional_type(kind.value_type, counter), value_required=False)
    return kind


def new_view_location(warehouse: str | None, name: TopicName) -> str | None:
    if not warehouse:
        return None
    return f"{warehouse.rstrip('/')}/{'/'.join(name.namespace)}/{name.topic}-attached-{uuid.uuid4().hex[:12]}"


__all__ = ["ATTACHED_PROPERTY", "AttachedLog", "attach_table", "check_mapping", "detach_table", "is_attached",
           "load_attached", "require_attached", "view_schema"]
