"""The lake's pyiceberg catalog (``SqlCatalog`` on the configured database, or ``RestCatalog`` on an Iceberg REST
catalog: ``iceberg.rest``), and translation of its failures.

Opening a lake never creates one by accident: ``open_catalog`` fails with ``LakeNotFoundError`` naming the
warehouse and catalog it tried when the warehouse directory, the SQLite file, the catalog's tables or any
namespace of the catalog's name is missing, unless the caller creates the lake (``create=True``: only
``topic create``, which says so on standard error). A REST catalog exists when it answers for its warehouse.

pyiceberg creates the SQL catalog tables (the newer V1 layout) before Spark ever connects; Spark is then
started with ``jdbc.init-catalog-tables=false``. Creating them from Java instead would leave a read lock
on SQLite for the life of the SparkSession and an older layout that pyiceberg warns about.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from compactor.config import LakeConfig
from compactor.errors import LakeNotFoundError, StorageUnavailableError, TopicNotFoundError
from compactor.iceberg.internals import LakeSqlCatalog
from compactor.iceberg.rest import exception_chain as _chain
from compactor.iceberg.rest import open_rest_catalog, rest_failure

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 60


def s3_properties(config: LakeConfig) -> dict[str, str]:
    """pyiceberg's S3 file IO properties from the standard AWS variables (none when S3 is not in use)."""
    if not (config.is_s3 or config.s3.endpoint or (config.is_rest and config.s3.access_key_id)):
        return {}
    s3 = config.s3
    props: dict[str, str] = {}
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


def pyiceberg_properties(config: LakeConfig) -> dict[str, str]:
    """The pyiceberg ``SqlCatalog`` properties for ``config`` (S3 file IO included when needed)."""
    url = config.catalog.sqlalchemy_url
    if config.catalog.is_sqlite and "?" not in url:
        # Concurrent producers queue on SQLite's write lock instead of failing after 5 s.
        url = f"{url}?timeout={SQLITE_BUSY_TIMEOUT_S}"
    return {"uri": url, "warehouse": config.warehouse, "pool_pre_ping": "true", **s3_properties(config)}


def open_catalog(config: LakeConfig, *, create: bool = False) -> Catalog:
    """Open the lake's catalog; without ``create``, a lake that does not exist is ``LakeNotFoundError`` (module
    docstring). With ``create``, what is missing is made, and a new lake is announced on standard error."""
    if config.is_rest:
        return open_rest_catalog(config, s3_properties(config))
    missing = _missing_location(config)
    if missing is not None and not create:
        raise LakeNotFoundError(f"no lake at {config.describe()}: {missing}; `compactor topic create` makes a new "
                                "one (check --warehouse and --catalog-uri)")
    if create:
        local = config.local_warehouse_path
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        if config.catalog.is_sqlite:
            _sqlite_file(config).parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            catalog = LakeSqlCatalog(config.catalog_name, init_catalog_tables="true" if create else "false",
                                     **pyiceberg_properties(config))
    except Exception as exc:  # SQLAlchemy raises many driver-specific types
        raise StorageUnavailableError(f"cannot open the catalog database {config.catalog.describe()}: "
                                      f"{first_line(exc)}") from exc
    try:
        empty = _empty_catalog(catalog)
    except Exception as exc:
        catalog.close()
        raise storage_error(f"opening {config.describe()}", exc) from exc
    if empty is not None and not create:
        catalog.close()
        raise LakeNotFoundError(f"no lake at {config.describe()}: {empty}; `compactor topic create` makes a new "
                                "one (check --warehouse, --catalog-uri and COMPACTOR_CATALOG_NAME)")
    if empty is not None or missing is not None:
        log.warning("creating a new lake: %s", config.describe())
    return catalog


def _sqlite_file(config: LakeConfig) -> Path:
    return Path(config.catalog.sqlalchemy_url.split("///", 1)[1])


def _missing_location(config: LakeConfig) -> str | None:
    """What of a SQL catalog's lake is missing on disk (the warehouse directory, the SQLite file), if anything."""
    local = config.local_warehouse_path
    if local is not None and not local.is_dir():
        return f"the warehouse directory {local} does not exist"
    if config.catalog.is_sqlite and not _sqlite_file(config).is_file():
        return f"the catalog file {_sqlite_file(config)} does not exist"
    return None


def _empty_catalog(catalog: LakeSqlCatalog) -> str | None:
    """Why the catalog holds no lake (no catalog tables, or no namespace under its name), or None if it does.
    Every lake has a namespace: ``topic create`` makes its topic's."""
    from sqlalchemy import inspect

    if not inspect(catalog.engine).has_table("iceberg_tables"):
        return "the database has no Iceberg catalog tables"
    if not catalog.list_namespaces():
        return f"the database holds no catalog named '{catalog.name}'"
    return None


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
        if (isinstance(exc, OSError | ConnectionError | TimeoutError) or is_storage_failure(exc)
                or rest_failure(action, exc) is not None):
            raise storage_error(action, exc) from exc
        raise


ACCESS_DENIED_MARKERS = ("access denied", "access_denied", "accessdenied", "invalidaccesskeyid",
                         "signaturedoesnotmatch", "forbidden", "password authentication failed")
NO_BUCKET_MARKERS = ("nosuchbucket", "no_such_bucket", "bucket does not exist", "specified bucket does not exist")


def storage_error(action: str, exc: BaseException) -> Exception:
    """The typed error for a storage failure: refused credentials, a missing bucket, or an outage (a REST
    catalog's failures as ``iceberg.rest.rest_failure`` classifies them)."""
    from compactor.errors import StorageAccessDeniedError

    rest = rest_failure(action, exc)
    if rest is not None:
        return rest
    text = " ".join(str(e) for e in _chain(exc)).lower()
    detail = first_line(exc)
    if any(marker in text for marker in ACCESS_DENIED_MARKERS):
        return StorageAccessDeniedError(
            f"{action}: access denied: the object store or catalog refused the credentials (check "
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the catalog URI's user, and the bucket policy): {detail}")
    if any(marker in text for marker in NO_BUCKET_MARKERS):
        return LakeNotFoundError(f"{action}: the warehouse bucket does not exist (create it, or fix "
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


def first_line(exc: BaseException) -> str:
    """The line of an exception's text that names the problem, for one-line messages.

    A Py4J error from Spark reads "An error occurred while calling o59.sql." and names the Java exception on
    the next line (": org.apache.iceberg.exceptions.CommitFailedException: ..."); that line is the useful one.
    """
    lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].lstrip(": ").strip()[:500]
    return lines[0][:500]
