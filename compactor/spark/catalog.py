"""The lake's catalog and object storage as Spark settings, and how they reach a running session.

Iceberg's ``SparkCatalog`` on the same JDBC catalog pyiceberg uses, or on the same REST catalog (Iceberg's
``RESTCatalog``, with the same properties: ``compactor.rest_catalog``), and S3A for ``s3://`` warehouses.
Settings without secrets may be given at start-up; credentials only ever reach a running session (see
``catalog_settings``), and the catalog password, REST client credentials, token and headers only for as long as
the catalog takes to initialise.

On a REST catalog, Spark's Iceberg reads and writes ``s3://`` tables through Iceberg's ``S3FileIO`` (the ``aws``
jar set), which uses the storage credentials the catalog vends with each table; the product's own Spark reads
and writes of files (raw files by path, position deletes) go through S3A, which gets a table's vended
credentials for its bucket (``table_storage_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from compactor.config import LakeConfig
from compactor.spark import internals
from compactor.spark.active import active_session
from compactor.spark.jars import s3_jars_installed

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession


def catalog_settings(config: LakeConfig) -> dict[str, str]:
    """The ``spark.sql.catalog.<name>.*`` settings (and S3A settings) for ``config``, without credentials.

    Credentials (``credential_settings``) are set on a running session only: a setting given at start-up goes
    on the command line of the JVM that PySpark or ``spark-submit`` launches, where any local user can read it.
    """
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    if config.catalog.rest is not None:
        return rest_settings(config)
    warehouse = config.warehouse
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": config.catalog.jdbc_url,
        f"{prefix}.warehouse": warehouse,
        # pyiceberg creates the catalog tables; Java creating them would hold a SQLite read lock for the
        # life of the session and use the older layout (docs/operations.md, "Set-up").
        f"{prefix}.jdbc.init-catalog-tables": "false",
        # pyiceberg commits while Spark runs; a cached table would hide them for 30 s.
        f"{prefix}.cache-enabled": "false",
    }
    if config.catalog.is_sqlite:
        # Several processes may commit to one SQLite file: wait for its write lock instead of failing after
        # sqlite-jdbc's default 3 s (pyiceberg's side uses the same 60 s, see catalog.py).
        settings[f"{prefix}.jdbc.busy_timeout"] = "60000"
    if config.catalog.jdbc_user:
        settings[f"{prefix}.jdbc.user"] = config.catalog.jdbc_user
    if config.is_s3:
        settings.update(s3a_settings(config))
    return settings


def uses_s3(config: LakeConfig) -> bool:
    """Whether Spark sessions for ``config`` get S3 (S3A and, on a REST catalog, ``S3FileIO``): for an ``s3://``
    warehouse, and for a REST catalog (which may place tables on S3) whenever the S3 jars are installed."""
    return config.is_s3 or (config.is_rest and s3_jars_installed())


def rest_settings(config: LakeConfig) -> dict[str, str]:
    """Iceberg's ``RESTCatalog`` with the catalog's properties but its secrets (``credential_settings``)."""
    rest = config.catalog.rest
    assert rest is not None
    prefix = f"spark.sql.catalog.{config.catalog_name}"
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": rest.uri,
        f"{prefix}.cache-enabled": "false",  # pyiceberg commits while Spark runs (as for the SQL catalogs)
        # ask for the table's storage credentials, as pyiceberg does by default
        f"{prefix}.header.X-Iceberg-Access-Delegation": "vended-credentials",
        **{f"{prefix}.{key}": value for key, value in rest.plain.items()},
    }
    if rest.authenticates:
        settings[f"{prefix}.rest.auth.type"] = "oauth2"  # what Iceberg infers from a credential or token
    if uses_s3(config):
        s3 = config.s3
        if s3.endpoint:
            settings[f"{prefix}.s3.endpoint"] = s3.endpoint
        settings[f"{prefix}.s3.path-style-access"] = "true" if s3.path_style else "false"
        settings[f"{prefix}.client.region"] = s3.region
        settings.update(s3a_settings(config))
    return settings


def credential_settings(config: LakeConfig) -> dict[str, str]:
    """The secrets among the session settings: the catalog password, a REST catalog's credential, token and
    headers, and the S3 keys (set at runtime only).

    Executors receive them without a command line either: Iceberg's file IO and Spark's file writers carry the
    driver's Hadoop configuration to their tasks.
    """
    out: dict[str, str] = {}
    prefix = f"spark.sql.catalog.{config.catalog_name}"
    if config.catalog.jdbc_password:
        out[f"{prefix}.jdbc.password"] = config.catalog.jdbc_password
    rest = config.catalog.rest
    if rest is not None:
        out.update({f"{prefix}.{key}": value for key, value in rest.secret.items()})
    s3 = config.s3
    if rest is not None and uses_s3(config) and s3.access_key_id:  # S3FileIO's, before a table's vended ones
        out[f"{prefix}.s3.access-key-id"] = s3.access_key_id
        out[f"{prefix}.s3.secret-access-key"] = s3.secret_access_key or ""
        if s3.session_token:
            out[f"{prefix}.s3.session-token"] = s3.session_token
    if uses_s3(config) and s3.access_key_id:
        out["spark.hadoop.fs.s3a.access.key"] = s3.access_key_id
        out["spark.hadoop.fs.s3a.secret.key"] = s3.secret_access_key or ""
        if s3.session_token:
            out["spark.hadoop.fs.s3a.session.token"] = s3.session_token
    return out


def s3a_settings(config: LakeConfig) -> dict[str, str]:
    """Hadoop S3A settings: path-style access and explicit endpoint for MinIO and moto."""
    s3 = config.s3
    out = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": "true" if s3.path_style else "false",
        "spark.hadoop.fs.s3a.endpoint.region": s3.region,
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "10000",
        "spark.hadoop.fs.s3a.connection.timeout": "30000",
    }
    if s3.endpoint:
        parts = urlsplit(s3.endpoint)
        out["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "true" if parts.scheme == "https" else "false"
    if s3.access_key_id:  # the keys themselves are set at runtime (credential_settings)
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if s3.session_token
            else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return out


def table_storage_settings(io_properties: Mapping[str, str], location: str) -> dict[str, str]:
    """Hadoop settings giving S3A, for the bucket of ``location``, the storage credentials a table's file IO
    carries (those a REST catalog vended with it), for the product's own Spark reads and writes of that table's
    files by path; nothing for other locations, or when the IO has no credentials."""
    parts = urlsplit(location)
    key = io_properties.get("s3.access-key-id")
    if parts.scheme not in ("s3", "s3a", "s3n") or not parts.netloc or not key:
        return {}
    prefix = f"fs.s3a.bucket.{parts.netloc}."
    token = io_properties.get("s3.session-token")
    out = {f"{prefix}access.key": key, f"{prefix}secret.key": io_properties.get("s3.secret-access-key", ""),
           f"{prefix}aws.credentials.provider": ("org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if token
                                                else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")}
    if token:
        out[f"{prefix}session.token"] = token
    if io_properties.get("s3.endpoint"):
        out[f"{prefix}endpoint"] = io_properties["s3.endpoint"]
    return out


def register_table_storage(spark: SparkSession, config: LakeConfig, table: Table) -> None:
    """On a REST catalog, give S3A the storage credentials the catalog vended with ``table``
    (``table_storage_settings``), in the running session's Hadoop configuration only (never a command line or a
    session setting: Spark's jobs carry that configuration to their tasks)."""
    if not config.is_rest:
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in table_storage_settings(table.io.properties, table.metadata.location).items():
        hadoop.set(key, value)


def register_catalog(spark: SparkSession, config: LakeConfig) -> None:
    """Point a running session at ``config``'s catalog (SQL settings at runtime, S3A via Hadoop's conf).

    Iceberg initialises a catalog on first use and caches it by name, so a running session can serve
    several lakes only under different catalog names (tests use one name per warehouse).

    The catalog password is a session setting only while the catalog initialises, then it is removed: Spark
    copies every SQL setting of a session into the properties of each job it runs, and writes those, unredacted
    (Spark redacts only its start-up settings), into the event log. The initialised catalog keeps it.
    """
    hadoop = internals.hadoop_configuration(spark)
    secrets = credential_settings(config)
    for key, value in {**catalog_settings(config), **secrets}.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
        else:
            spark.conf.set(key, value)
    transient = [key for key in secrets if not key.startswith("spark.hadoop.")]
    if transient:
        try:
            _initialise_catalog(spark, config.catalog_name)
        finally:  # also when the catalog cannot connect: the password must not stay in the session
            for key in transient:
                spark.conf.unset(key)


def _initialise_catalog(spark: SparkSession, name: str) -> None:
    """Make ``spark``'s catalog ``name`` read its settings now (Spark reads them from the *active* session)."""
    with active_session(spark):
        internals.java_session(spark).sessionState().catalogManager().catalog(name)
