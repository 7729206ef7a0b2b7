"""Following the source's schema: the view gains the columns added to the source (docs/guarantees.md#attached-logs);
a change it cannot follow is an error naming it, raised before a run writes anything."""

from __future__ import annotations

import logging
from typing import Any

from pyiceberg.exceptions import ValidationError
from pyiceberg.schema import index_by_name
from pyiceberg.table import Table, TableProperties

from compactor.attach.mapping import AttachError
from compactor.attach.registry import AttachedLog, source_part, view_schema
from compactor.iceberg.catalog import translate_storage_errors

log = logging.getLogger(__name__)


def follow_schema(attached: AttachedLog, source: Table) -> None:
    """Add to the view the columns added to the source (nested ones too); a change the view cannot follow (a
    column whose type changed incompatibly) is an ``AttachError`` naming it, and nothing changes."""
    wanted = view_schema(source.schema())
    have = attached.view.schema()
    missing = _new_paths(source_part(wanted), source_part(have))
    for path in _common_paths(source_part(wanted), source_part(have)):
        new_type, old_type = wanted.find_type(path), have.find_type(path)
        if new_type.is_primitive and old_type.is_primitive and new_type != old_type \
                and not _promotable(old_type, new_type):
            raise AttachError(f"the source {attached.mapping.source} changed column '{path}' from {old_type} to "
                              f"{new_type}: the view of {attached.name} cannot follow that change; nothing was written")
    if not missing:
        return
    try:
        with translate_storage_errors(f"adding columns to the view of {attached.name}"):
            with attached.view.transaction() as tx, tx.update_schema() as update:
                update.union_by_name(source_part(wanted))
            view = attached.refresh().view
            with view.transaction() as tx:
                tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: view.schema().name_mapping.model_dump_json()})
    except (ValidationError, ValueError) as exc:
        raise AttachError(f"the source {attached.mapping.source} changed its schema in a way the view of "
                          f"{attached.name} cannot follow ({exc}); nothing was written") from None
    attached.refresh()
    log.info("the view of %s follows the source's new column(s): %s", attached.name, ", ".join(missing))


def _new_paths(wanted: Any, have: Any) -> list[str]:
    have_names = set(index_by_name(have))
    return sorted(n for n in index_by_name(wanted) if n not in have_names)


def _common_paths(wanted: Any, have: Any) -> list[str]:
    have_names = set(index_by_name(have))
    return sorted(n for n in index_by_name(wanted) if n in have_names)


def _promotable(old: Any, new: Any) -> bool:
    from pyiceberg.types import DoubleType, FloatType, IntegerType, LongType

    return (isinstance(old, IntegerType) and isinstance(new, LongType)) or \
        (isinstance(old, FloatType) and isinstance(new, DoubleType))
