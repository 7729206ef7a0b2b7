"""Where a lake's groups live (``--group-store URI``, env ``COMPACTOR_GROUP_STORE``, ``Lake(group_store=...)``).

* ``sqlite:///path`` or ``postgresql://user@host/db``: a database (``groups.sql_backend``). A PostgreSQL password
  comes from the URI or, like the catalog's, from ``COMPACTOR_CATALOG_PASSWORD`` / ``..._FILE``.
* ``s3://bucket/prefix``: the object store, with conditional writes (``groups.object_backend``).
* ``file:///dir`` or a directory path: a local directory, with atomic create (one host).

Default: the catalog's own database when the catalog is a SQL database (a local warehouse's ``catalog.db``:
nothing to set up), else (an Iceberg REST catalog) ``<warehouse>/_groups`` in the warehouse's own storage
when a warehouse location is given; a REST catalog that places its tables itself needs ``--group-store``.
Groups of a lake are kept apart from other lakes' by the catalog name (a column of the rows, a path segment of
the objects).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from compactor.config import CatalogUri, LakeConfig, catalog_password
from compactor.errors import InputError
from compactor.groups.backend import Backend, Clock

GROUP_STORE_ENV = "COMPACTOR_GROUP_STORE"
DEFAULT_PREFIX = "_groups"


def has_group_store(config: LakeConfig) -> bool:
    """Whether ``config``'s lake has a place for consumer groups: one it names, else the default. Only a REST
    catalog that places its tables itself (no warehouse location) has none; there, no group can exist, so
    ``status`` shows none and the cleaner expires none, while a consumer or ``group`` verb gets the error of
    ``group_store_uri`` naming ``--group-store``."""
    return bool(config.group_store) or not config.catalog.is_rest or bool(config.warehouse)


def group_store_uri(config: LakeConfig) -> str:
    """The group store of ``config``: the one it names, else the default (see the module docstring)."""
    if config.group_store:
        return config.group_store
    catalog = config.catalog
    if not catalog.is_rest and catalog.sqlalchemy_url.startswith(("sqlite", "postgresql")):
        return catalog.sqlalchemy_url
    if not has_group_store(config):
        raise InputError(f"{catalog.describe()} places its tables itself, so consumer groups have no default place: "
                         "give one with --group-store (or COMPACTOR_GROUP_STORE): s3://bucket/prefix, "
                         "postgresql://user@host/db or a directory")
    return f"{config.warehouse.rstrip('/')}/{DEFAULT_PREFIX}"


def open_backend(config: LakeConfig, *, clock: Clock | None = None) -> Backend:
    """A back-end for ``config``'s group store."""
    uri = group_store_uri(config).strip()
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme.startswith(("sqlite", "postgres", "jdbc")):
        from compactor.groups.sql_backend import SqlBackend

        return SqlBackend(CatalogUri.parse(uri, catalog_password(os.environ)), config.catalog_name, clock=clock)
    from compactor.groups.object_backend import ObjectBackend

    if scheme in ("s3", "s3a"):
        from compactor.groups.objects_s3 import S3Objects

        parts = urlsplit(uri)
        if not parts.netloc:
            raise InputError(f"a group store on S3 needs a bucket: {uri!r}")
        prefix = f"{parts.path.strip('/')}/{config.catalog_name}".strip("/")
        return ObjectBackend(S3Objects(parts.netloc, prefix, config.s3), clock=clock)
    if scheme in ("", "file"):
        from compactor.groups.objects_local import LocalObjects

        path = Path(urlsplit(uri).path if scheme else uri).expanduser().resolve()
        return ObjectBackend(LocalObjects(path / config.catalog_name), clock=clock)
    raise InputError(f"unsupported group store {uri!r}: use sqlite:///path, postgresql://user@host/db, "
                     "s3://bucket/prefix or a directory")
