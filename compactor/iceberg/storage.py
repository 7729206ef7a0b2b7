"""Direct access to the warehouse's files (local or S3) for listing and deleting: used by topic deletion,
snapshot expiry and orphan cleanup. Reads and writes of table data go through Iceberg, never through here.

Whether a location is on S3 is read from the location itself (a REST catalog may place tables anywhere). Given a
table's file IO (``io``), S3 is reached with that IO's own settings, so the storage credentials a REST catalog
vends with a table are the ones used for its files; otherwise with the standard AWS variables.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from compactor.config import LakeConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredFile:
    """A file in the warehouse: its location as Iceberg writes it, size, and modification time."""

    location: str
    size: int
    mtime_ms: int | None


def is_s3_location(location: str) -> bool:
    return location.startswith(("s3://", "s3a://", "s3n://"))


def filesystem(config: LakeConfig, location: str | None = None, io: FileIO | None = None) -> pafs.FileSystem:
    """A pyarrow filesystem for ``location`` (default: the warehouse): the table file IO ``io``'s own when it has
    one (a REST catalog's vended credentials), else one from the standard AWS variables (S3 honours the endpoint
    from ``AWS_ENDPOINT_URL``)."""
    target = location if location is not None else config.warehouse
    if not is_s3_location(target):
        return pafs.LocalFileSystem()
    if isinstance(io, PyArrowFileIO):
        scheme, netloc, _ = PyArrowFileIO.parse_location(target)
        return io.fs_by_scheme(scheme, netloc)
    s3 = config.s3
    kwargs: dict[str, object] = {"region": s3.region, "connect_timeout": 10, "request_timeout": 30,
                                 "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3)}
    if s3.endpoint:
        parts = urlsplit(s3.endpoint)
        kwargs["endpoint_override"] = parts.netloc or parts.path
        kwargs["scheme"] = parts.scheme or "https"
    if s3.access_key_id:
        kwargs["access_key"] = s3.access_key_id
        kwargs["secret_key"] = s3.secret_access_key
        if s3.session_token:
            kwargs["session_token"] = s3.session_token
    kwargs["force_virtual_addressing"] = not s3.path_style
    return pafs.S3FileSystem(**kwargs)


def fs_path(location: str) -> str:
    """``file:///a/b`` -> ``/a/b``; ``s3://bucket/key`` (or ``s3a://``) -> ``bucket/key``."""
    if is_s3_location(location):
        return location.split("://", 1)[1]
    if location.startswith("file:"):
        return urlsplit(location).path
    return location


def _location_for(prefix: str, path: str) -> str:
    return f"s3://{path}" if is_s3_location(prefix) else f"file://{path}"


def list_files(config: LakeConfig, prefix: str, io: FileIO | None = None) -> Iterator[StoredFile]:
    """Every file below ``prefix`` (a directory location), recursively; nothing if it does not exist."""
    fs = filesystem(config, prefix, io)
    selector = pafs.FileSelector(fs_path(prefix).rstrip("/"), recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else None
        yield StoredFile(_location_for(prefix, info.path), int(info.size or 0), mtime)


def delete_files(config: LakeConfig, locations: Iterable[str], io: FileIO | None = None) -> int:
    """Delete files (missing ones are fine); returns how many were asked for."""
    count = 0
    systems: dict[bool, pafs.FileSystem] = {}
    for location in locations:
        s3 = is_s3_location(location)
        if s3 not in systems:
            systems[s3] = filesystem(config, location, io)
        with contextlib.suppress(FileNotFoundError):
            systems[s3].delete_file(fs_path(location))
        count += 1
    return count


def delete_prefix(config: LakeConfig, prefix: str, io: FileIO | None = None) -> int:
    """Delete everything below a directory location; returns the number of files removed."""
    files = [f.location for f in list_files(config, prefix, io)]
    delete_files(config, files, io)
    if not is_s3_location(prefix):
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem(config, prefix, io).delete_dir(fs_path(prefix))
    return len(files)


def delete_uncommitted(io: FileIO, paths: Iterable[str]) -> None:
    """Delete files written for a commit that did not happen, best effort: orphan cleanup removes what is left."""
    for path in paths:
        try:
            io.delete(path)
        except Exception:
            log.debug("could not delete uncommitted file %s", path, exc_info=True)


def drop_stale_tables(catalog: Catalog, config: LakeConfig, namespace: tuple[str, ...], prefix: str,
                      stale: Callable[[str, Table], bool], what: str, *, dry_run: bool = False) -> list[str]:
    """Drop the tables of ``namespace`` named ``prefix...`` that ``stale(identifier, table)`` accepts (what a
    process that died left behind), and the files under their locations; returns their identifiers (in a dry
    run, those it would drop). Best effort: what cannot be listed, read or dropped is left for the next pass."""
    try:
        identifiers = [".".join(i) for i in catalog.list_tables(namespace) if i[-1].startswith(prefix)]
    except Exception as exc:
        log.info("could not list the tables of %s to drop stale %ss: %s", ".".join(namespace), what, exc)
        return []
    dropped: list[str] = []
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
        except Exception:  # dropped meanwhile, or unreadable
            continue
        if not stale(identifier, table):
            continue
        if not dry_run:
            try:
                catalog.drop_table(identifier)
            except Exception as exc:
                log.info("could not drop the stale %s %s: %s", what, identifier, exc)
                continue
            with contextlib.suppress(Exception):  # files nothing refers to any more
                delete_prefix(config, table.metadata.location, table.io)
        dropped.append(identifier)
    return dropped
