"""pyiceberg's ``SqlCatalog`` on the configured database, and translation of its failures.

pyiceberg creates the catalog tables (the newer V1 layout) before Spark ever connects; Spark is then
started with ``jdbc.init-catalog-tables=false``. Creating them from Java instead would leave a read lock
on SQLite for the life of the SparkSession and an older layout that pyiceberg warns about.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from compactor.config import LakeConfig, mask_password
from compactor.errors import StorageUnavailableError, TopicNotFoundError
from compactor.iceberg.internals import LakeSqlCatalog

SQLITE_BUSY_TIMEOUT_S = 60


def pyiceberg_properties(config: LakeConfig) -> dict[str, str]:
    """The pyiceberg catalog properties for ``config`` (S3 file IO included when needed)."""
    url = config.catalog.sqlalchemy_url
    if config.catalog.is_sqlite and "?" not in url:
        # Concurrent producers queue on SQLite's write lock instead of failing after 5 s.
        url = f"{url}?timeout={SQLITE_BUSY_TIMEOUT_S}"
    props = {"uri": url, "warehouse": config.warehouse, "pool_pre_ping": "true"}
    if config.is_s3 or config.s3.endpoint:
        s3 = config.s3
        if s3.endpoint:
            props["s3.endpoint"] = s3.endpoint
        if s3.access_key_id:
            props["s3.access-key-id"] = s3.access_key_id
        if s3.secret_access_key:
            props["s3.secret-access-key"] = s3.secret_access_key
        if s3.session_token:
            props["s3.session-token"] = s3.session_token
        props["s3.region"] = s3.region
        props["s3.force-virtual-addressing"] = "false" if s3.path_style else "true"
        props["s3.connect-timeout"] = "10"
        props["s3.request-timeout"] = "30"
    return props


def open_catalog(config: LakeConfig) -> SqlCatalog:
    """Open (and on first use create) the catalog database; a clear error if it cannot be reached."""
    local = config.local_warehouse_path
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
    if config.catalog.is_sqlite:
        Path(config.catalog.sqlalchemy_url.split("///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LakeSqlCatalog(config.catalog_name, **pyiceberg_properties(config))
    except Exception as exc:  # SQLAlchemy raises many driver-specific types
        raise StorageUnavailableError(
            f"cannot open the catalog database {mask_password(config.catalog.sqlalchemy_url)}: {first_line(exc)}"
        ) from exc


def load_table(catalog: Catalog, identifier: str) -> Table:
    """Load a table, turning a missing one into ``TopicNotFoundError`` and outages into a clear error."""
    with translate_storage_errors(f"loading {identifier}"):
        try:
            return catalog.load_table(identifier)
        except NoSuchTableError as exc:
            raise TopicNotFoundError(f"unknown topic '{identifier}'") from exc


def load_table_if_exists(catalog: Catalog, identifier: str) -> Table | None:
    """Load a table, or None when it does not exist (outages become a clear error)."""
    with translate_storage_errors(f"loading {identifier}"):
        try:
            return catalog.load_table(identifier)
        except NoSuchTableError:
            return None


@contextlib.contextmanager
def translate_storage_errors(action: str) -> Iterator[None]:
    """Re-raise connection and object-store failures as ``StorageUnavailableError`` naming ``action``."""
    from compactor.errors import CompactorError

    try:
        yield
    except CompactorError:
        raise
    except NoSuchTableError:
        raise
    except Exception as exc:
        if isinstance(exc, OSError | ConnectionError | TimeoutError) or is_storage_failure(exc):
            raise storage_error(action, exc) from exc
        raise


ACCESS_DENIED_MARKERS = ("access denied", "access_denied", "accessdenied", "invalidaccesskeyid",
                         "signaturedoesnotmatch", "forbidden", "password authentication failed")
NO_BUCKET_MARKERS = ("nosuchbucket", "no_such_bucket", "bucket does not exist", "specified bucket does not exist")


def storage_error(action: str, exc: BaseException) -> Exception:
    """The typed error for a storage failure: refused credentials, a missing bucket, or an outage."""
    from compactor.errors import BucketNotFoundError, StorageAccessDeniedError

    text = " ".join(str(e) for e in _chain(exc)).lower()
    detail = first_line(exc)
    if any(marker in text for marker in ACCESS_DENIED_MARKERS):
        return StorageAccessDeniedError(
            f"{action}: access denied: the object store or catalog refused the credentials (check "
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the catalog URI's user, and the bucket policy): {detail}")
    if any(marker in text for marker in NO_BUCKET_MARKERS):
        return BucketNotFoundError(f"{action}: the warehouse bucket does not exist (create it, or fix "
                                   f"--warehouse): {detail}")
    return StorageUnavailableError(f"{action}: storage unavailable: {detail}")


def is_storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` looks like a database or object-store outage rather than a logic error."""
    names = {type(e).__name__ for e in _chain(exc)}
    modules = {type(e).__module__.split(".")[0] for e in _chain(exc)}
    if names & {"OperationalError", "InterfaceError", "DisconnectionError", "ConnectionError",
                "EndpointConnectionError", "ClientError", "NoCredentialsError"}:
        return True
    text = " ".join(str(e) for e in _chain(exc)).lower()
    markers = ("access denied", "accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "nosuchbucket",
               "connection refused", "could not connect", "failed to connect", "curlcode", "unable to connect",
               "timed out", "name or service not known")
    return bool(modules & {"sqlalchemy", "botocore", "psycopg2"}) or any(m in text for m in markers)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def first_line(exc: BaseException) -> str:
    """The line of an exception's text that names the problem, for one-line messages.

    A Py4J error from Spark reads "An error occurred while calling o59.sql." and names the Java exception on
    the next line (": org.apache.iceberg.exceptions.CommitFailedException: ..."); that line is the useful one.
    """
    lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].lstrip(": ").strip()[:500]
    return lines[0][:500]
