"""Direct access to the warehouse's files (local or S3) for listing and deleting: used by topic deletion,
snapshot expiry and orphan cleanup. Reads and writes of table data go through Iceberg, never through here.
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
from pyiceberg.table import Table

from compactor.config import LakeConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredFile:
    """A file in the warehouse: its location as Iceberg writes it, size, and modification time."""

    location: str
    size: int
    mtime_ms: int | None


def filesystem(config: LakeConfig) -> pafs.FileSystem:
    """A pyarrow filesystem for the warehouse (S3 honours the endpoint from ``AWS_ENDPOINT_URL``)."""
    if not config.is_s3:
        return pafs.LocalFileSystem()
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
    if location.startswith(("s3://", "s3a://", "s3n://")):
        return location.split("://", 1)[1]
    if location.startswith("file:"):
        return urlsplit(location).path
    return location


def _location_for(config: LakeConfig, path: str) -> str:
    return f"s3://{path}" if config.is_s3 else f"file://{path}"


def list_files(config: LakeConfig, prefix: str) -> Iterator[StoredFile]:
    """Every file below ``prefix`` (a directory location), recursively; nothing if it does not exist."""
    fs = filesystem(config)
    selector = pafs.FileSelector(fs_path(prefix).rstrip("/"), recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else None
        yield StoredFile(_location_for(config, info.path), int(info.size or 0), mtime)


def delete_files(config: LakeConfig, locations: Iterable[str]) -> int:
    """Delete files (missing ones are fine); returns how many were asked for."""
    fs = filesystem(config)
    count = 0
    for location in locations:
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(fs_path(location))
        count += 1
    return count


def delete_prefix(config: LakeConfig, prefix: str) -> int:
    """Delete everything below a directory location; returns the number of files removed."""
    files = [f.location for f in list_files(config, prefix)]
    delete_files(config, files)
    if not config.is_s3:
        fs = filesystem(config)
        with contextlib.suppress(FileNotFoundError, OSError):
            fs.delete_dir(fs_path(prefix))
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
                delete_prefix(config, table.metadata.location)
        dropped.append(identifier)
    return dropped
