"""Where the lake is: warehouse location, catalog database, object-store credentials.

Configuration is layered like pyiceberg's: explicit arguments win over environment variables, which win
over defaults. The environment variables are the ones the command line documents
(``COMPACTOR_WAREHOUSE``, ``COMPACTOR_CATALOG_URI``) plus the standard AWS ones for S3, so MinIO and moto
work by pointing ``AWS_ENDPOINT_URL`` at them.

A ``LakeConfig`` renders the same catalog for both engines: pyiceberg's ``SqlCatalog`` (SQLAlchemy URL) and
Iceberg's Spark ``JdbcCatalog`` (JDBC URL), whose catalog name is stored in every catalog row, so both sides
must use the same one; or an Iceberg REST catalog (``http(s)://``, ``compactor.rest_catalog``), pyiceberg's
``RestCatalog`` and Iceberg's ``RESTCatalog`` with the same properties. A REST catalog chooses its tables'
locations unless a warehouse location is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from compactor.errors import InputError
from compactor.rest_catalog import RestCatalogSettings

DEFAULT_CATALOG_NAME = "lake"
CATALOG_FILE = "catalog.db"


@dataclass(frozen=True)
class S3Settings:
    """Object-store endpoint and credentials (from the standard AWS variables unless given)."""

    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str = "us-east-1"
    path_style: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> S3Settings:
        return cls(
            endpoint=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            path_style=env.get("COMPACTOR_S3_PATH_STYLE", "true").lower() != "false",
        )


@dataclass(frozen=True)
class CatalogUri:
    """One catalog database, expressed for SQLAlchemy (pyiceberg) and for JDBC (Spark); or, with ``rest`` set
    (and both URLs empty), an Iceberg REST catalog."""

    sqlalchemy_url: str
    jdbc_url: str
    jdbc_user: str | None = None
    jdbc_password: str | None = field(default=None, repr=False)
    rest: RestCatalogSettings | None = None

    @property
    def is_sqlite(self) -> bool:
        return self.sqlalchemy_url.startswith("sqlite")

    @property
    def is_rest(self) -> bool:
        return self.rest is not None

    def describe(self) -> str:
        """For messages: which catalog this is, without a password, token or client secret."""
        if self.rest is not None:
            return self.rest.describe()
        return mask_password(self.sqlalchemy_url.replace("+psycopg2", ""))

    @classmethod
    def rest_catalog(cls, uri: str, env: Mapping[str, str]) -> CatalogUri:
        """An Iceberg REST catalog at ``uri``, its properties and secrets from ``env`` (``rest_catalog``)."""
        return cls(sqlalchemy_url="", jdbc_url="", rest=RestCatalogSettings.resolve(uri, env))

    @classmethod
    def parse(cls, uri: str, password: str | None = None) -> CatalogUri:
        """Accept a SQLite file path, ``sqlite:///path``, ``jdbc:sqlite:path`` or ``postgresql://...``.

        ``password`` is the PostgreSQL password when the URI carries none (from ``COMPACTOR_CATALOG_PASSWORD``
        or ``COMPACTOR_CATALOG_PASSWORD_FILE``), so it never has to appear on a command line.
        """
        text = uri.strip()
        if not text:
            raise InputError("the catalog URI is empty")
        if text.startswith("jdbc:"):
            text = text[len("jdbc:"):]
        if text.startswith("sqlite:"):
            path = text[len("sqlite:"):]
            while path.startswith("//"):
                path = path[1:]
            return cls._sqlite(path)
        scheme = text.split("://", 1)[0] if "://" in text else ""
        if scheme.startswith(("postgresql", "postgres")):
            return cls._postgres(text, password)
        if scheme:
            raise InputError(
                f"unsupported catalog URI scheme '{scheme}': use a SQLite file path, postgresql://user@host/db or "
                "an Iceberg REST catalog's http(s)://host/path"
            )
        return cls._sqlite(text)

    @classmethod
    def _sqlite(cls, path: str) -> CatalogUri:
        absolute = Path(path).expanduser().resolve()
        return cls(sqlalchemy_url=f"sqlite:///{absolute}", jdbc_url=f"jdbc:sqlite:{absolute}")

    @classmethod
    def _postgres(cls, text: str, given_password: str | None) -> CatalogUri:
        parts = urlsplit(text)
        if not parts.hostname or not parts.path.strip("/"):
            raise InputError(f"a PostgreSQL catalog URI needs a host and a database: {mask_password(text)!r}")
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        database = parts.path.lstrip("/")
        user = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else given_password
        credentials = ""
        if parts.username:
            credentials = parts.username + (f":{quote(password, safe='')}" if password else "") + "@"
        query = f"?{parts.query}" if parts.query else ""
        return cls(
            sqlalchemy_url=f"postgresql+psycopg2://{credentials}{host}/{database}{query}",
            jdbc_url=f"jdbc:postgresql://{host}/{database}{query}",
            jdbc_user=user,
            jdbc_password=password,
        )


@dataclass(frozen=True)
class LakeConfig:
    """Everything needed to open the lake: warehouse, catalog and (for S3) credentials."""

    warehouse: str
    catalog: CatalogUri
    catalog_name: str = DEFAULT_CATALOG_NAME
    s3: S3Settings = field(default_factory=S3Settings)
    group_store: str | None = None  # where consumer groups live (``groups.location``); None: the default

    @property
    def is_s3(self) -> bool:
        return self.warehouse.startswith("s3://")

    @property
    def is_rest(self) -> bool:
        return self.catalog.is_rest

    @property
    def local_warehouse_path(self) -> Path | None:
        if self.is_s3 or not self.warehouse:
            return None
        return Path(urlsplit(self.warehouse).path)

    def describe(self) -> str:
        """For messages: the catalog (name and where it is) and the warehouse, without secrets."""
        if self.catalog.is_rest:
            where = f"warehouse location {self.warehouse}" if self.warehouse else "its own table locations"
            return f"{self.catalog.describe()}, {where}"
        return f"catalog '{self.catalog_name}' in {self.catalog.describe()}, warehouse {self.warehouse}"

    @classmethod
    def resolve(
        cls,
        warehouse: str | None = None,
        catalog_uri: str | None = None,
        env: Mapping[str, str] | None = None,
        group_store: str | None = None,
    ) -> LakeConfig:
        """Combine arguments, environment and defaults into a validated configuration."""
        environ = os.environ if env is None else env
        raw_catalog = catalog_uri or environ.get("COMPACTOR_CATALOG_URI") or None
        catalog_name = environ.get("COMPACTOR_CATALOG_NAME") or DEFAULT_CATALOG_NAME
        s3 = S3Settings.from_env(environ)
        groups = group_store or environ.get("COMPACTOR_GROUP_STORE") or None
        if raw_catalog is not None and is_rest_uri(raw_catalog):
            # a REST catalog places its tables itself unless a warehouse location is given
            given = warehouse or environ.get("COMPACTOR_WAREHOUSE")
            return cls(warehouse=normalise_warehouse(given) if given else "",
                       catalog=CatalogUri.rest_catalog(raw_catalog.strip(), environ), catalog_name=catalog_name, s3=s3,
                       group_store=groups)
        raw_warehouse = warehouse or environ.get("COMPACTOR_WAREHOUSE") or "./warehouse"
        normalised = normalise_warehouse(raw_warehouse)
        if normalised.startswith("s3://"):
            if raw_catalog is None:
                raise InputError(
                    "an s3:// warehouse needs --catalog-uri (or COMPACTOR_CATALOG_URI): a SQLite file path, "
                    "postgresql://user@host/db (the password in COMPACTOR_CATALOG_PASSWORD or "
                    "COMPACTOR_CATALOG_PASSWORD_FILE) or an Iceberg REST catalog's https://host/path"
                )
            catalog = CatalogUri.parse(raw_catalog, catalog_password(environ))
        elif raw_catalog is None:
            local = Path(urlsplit(normalised).path)
            catalog = CatalogUri.parse(str(local / CATALOG_FILE))
        else:
            catalog = CatalogUri.parse(raw_catalog, catalog_password(environ))
        return cls(warehouse=normalised, catalog=catalog, catalog_name=catalog_name, s3=s3, group_store=groups)


def is_rest_uri(uri: str) -> bool:
    """Whether a catalog URI names an Iceberg REST catalog (``http://`` or ``https://``)."""
    return uri.strip().lower().startswith(("http://", "https://"))


def catalog_password(env: Mapping[str, str]) -> str | None:
    """The catalog password from ``COMPACTOR_CATALOG_PASSWORD``, or from the file ``COMPACTOR_CATALOG_PASSWORD_FILE``
    names, which must be readable by its owner only (like ``~/.pgpass``)."""
    if env.get("COMPACTOR_CATALOG_PASSWORD"):
        return env["COMPACTOR_CATALOG_PASSWORD"]
    path_text = env.get("COMPACTOR_CATALOG_PASSWORD_FILE")
    if not path_text:
        return None
    path = Path(path_text).expanduser()
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read COMPACTOR_CATALOG_PASSWORD_FILE {path}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise InputError(f"COMPACTOR_CATALOG_PASSWORD_FILE {path} is readable by others: chmod 600 {path}")
    return text.strip("\r\n") or None


def mask_password(url: str, replacement: str | None = "***") -> str:
    """``scheme://user:secret@host/db`` with the password replaced (``***`` for messages), or removed
    (``None``: for a command line). A URL without a password is returned unchanged."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    if ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{'' if replacement is None else ':' + replacement}@{host}"


def normalise_warehouse(location: str) -> str:
    """Return ``file:///abs/path`` for local directories and ``s3://bucket/prefix`` for S3."""
    text = location.strip()
    if not text:
        raise InputError("the warehouse location is empty")
    if text.startswith(("s3://", "s3a://")):
        rest = text.split("://", 1)[1].strip("/")
        bucket = rest.split("/", 1)[0]
        if not bucket:
            raise InputError(f"an S3 warehouse needs a bucket: {location!r}")
        return "s3://" + rest
    if text.startswith("file://"):
        text = urlsplit(text).path
    elif "://" in text:
        raise InputError(f"unsupported warehouse location {location!r}: use a directory or s3://bucket/prefix")
    absolute = Path(text).expanduser().resolve()
    return f"file://{absolute}"
