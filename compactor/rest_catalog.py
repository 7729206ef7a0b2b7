"""An Iceberg REST catalog's settings: its URI, and the catalog properties both engines take by the same names.

``--catalog-uri http(s)://...`` (or ``COMPACTOR_CATALOG_URI``) names the catalog's base URI (the one before
``/v1/config``). Everything else comes from the environment or a file, never from a command line:

* ``COMPACTOR_REST_PROPERTIES_FILE``: a file of ``key=value`` lines (``#`` starts a comment) holding any of
  Iceberg's REST catalog properties, by the names pyiceberg's ``RestCatalog`` and Iceberg's Java
  ``RESTCatalog`` both use: ``warehouse``, ``credential`` (OAuth2 ``client_id:client_secret``), ``token``,
  ``scope``, ``oauth2-server-uri``, ``audience``, ``resource``, ``header.NAME`` (an extra HTTP header),
  ``rest.sigv4-enabled``, ``rest.signing-region``, ``rest.signing-name``, ``rest.client.connection-timeout-ms``,
  ``rest.client.socket-timeout-ms``. A file holding a secret must be readable by its owner only.
* variables that override the file: ``COMPACTOR_REST_WAREHOUSE``, ``COMPACTOR_REST_SCOPE``,
  ``COMPACTOR_REST_OAUTH2_SERVER_URI``, and the secrets ``COMPACTOR_REST_CREDENTIAL`` / ``COMPACTOR_REST_TOKEN``
  or the files ``COMPACTOR_REST_CREDENTIAL_FILE`` / ``COMPACTOR_REST_TOKEN_FILE`` name (owner-only).

Secrets (``credential``, ``token``, every ``header.*`` value, and any property whose name says secret, password,
token, credential or key) are kept apart from the other properties, out of ``repr`` and of every message, so
the Spark side can set them on a running session only (``spark.catalog``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from compactor.errors import InputError

PROPERTIES_FILE_ENV = "COMPACTOR_REST_PROPERTIES_FILE"
# variable -> property; each secret one also has a ``..._FILE`` form
PLAIN_VARIABLES = {"COMPACTOR_REST_WAREHOUSE": "warehouse", "COMPACTOR_REST_SCOPE": "scope",
                   "COMPACTOR_REST_OAUTH2_SERVER_URI": "oauth2-server-uri"}
SECRET_VARIABLES = {"COMPACTOR_REST_CREDENTIAL": "credential", "COMPACTOR_REST_TOKEN": "token"}
CONNECT_TIMEOUT = "rest.client.connection-timeout-ms"
SOCKET_TIMEOUT = "rest.client.socket-timeout-ms"
DEFAULT_TIMEOUTS_MS = {CONNECT_TIMEOUT: "10000", SOCKET_TIMEOUT: "60000"}
_SECRET_NAME = re.compile(r"secret|password|token|credential|access-key|api-key", re.IGNORECASE)


def is_secret(key: str) -> bool:
    """Whether a catalog property holds a secret (its value never reaches a message, log or command line)."""
    return key.startswith("header.") or bool(_SECRET_NAME.search(key))


@dataclass(frozen=True)
class RestCatalogSettings:
    """One REST catalog: its base URI (without user information), its properties and, apart, its secrets."""

    uri: str
    properties: tuple[tuple[str, str], ...] = ()
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def warehouse(self) -> str | None:
        """The warehouse name the catalog is asked for (``/v1/config?warehouse=``), if any."""
        return dict(self.properties).get("warehouse")

    @property
    def plain(self) -> dict[str, str]:
        return dict(self.properties)

    @property
    def secret(self) -> dict[str, str]:
        return dict(self.secrets)

    @property
    def authenticates(self) -> str | None:
        """How the client authenticates: ``"client credentials"``, ``"token"`` or ``None``."""
        names = self.secret
        if "credential" in names:
            return "client credentials"
        return "token" if "token" in names else None

    def timeout_s(self, key: str) -> float:
        return int(self.plain.get(key, DEFAULT_TIMEOUTS_MS[key])) / 1000

    def describe(self) -> str:
        """For messages: the URI and warehouse name, never a secret."""
        warehouse = self.warehouse
        return f"REST catalog {self.uri}" + (f" (warehouse '{warehouse}')" if warehouse else "")

    @classmethod
    def resolve(cls, uri: str, env: Mapping[str, str]) -> RestCatalogSettings:
        """The settings for ``uri`` from the properties file and the variables of ``env``."""
        parts = urlsplit(uri.strip())
        if not parts.hostname:
            raise InputError(f"a REST catalog URI needs a host: {strip_user_info(uri)!r}")
        if parts.username or parts.password:
            raise InputError("a REST catalog URI must not carry credentials: give them in COMPACTOR_REST_CREDENTIAL "
                             "or COMPACTOR_REST_TOKEN (or their _FILE variables, or COMPACTOR_REST_PROPERTIES_FILE)")
        merged: dict[str, str] = dict(DEFAULT_TIMEOUTS_MS)
        if env.get(PROPERTIES_FILE_ENV):
            merged.update(read_properties_file(Path(env[PROPERTIES_FILE_ENV]).expanduser()))
        for variable, key in PLAIN_VARIABLES.items():
            if env.get(variable):
                merged[key] = env[variable]
        for variable, key in SECRET_VARIABLES.items():
            value = env.get(variable) or read_secret_file(env, f"{variable}_FILE")
            if value:
                merged[key] = value
        if "credential" in merged and ":" not in merged["credential"]:
            raise InputError("the REST catalog credential must read client_id:client_secret")
        if ("credential" in merged or "token" in merged) and "oauth2-server-uri" not in merged:
            # what both clients fall back to (with a deprecation warning each): the catalog's own token endpoint
            merged["oauth2-server-uri"] = urlunsplit(parts).rstrip("/") + "/v1/oauth/tokens"
        for key in (CONNECT_TIMEOUT, SOCKET_TIMEOUT):
            if not merged[key].isdigit() or int(merged[key]) <= 0:
                raise InputError(f"{key} must be a positive number of milliseconds, got {merged[key]!r}")
        plain = tuple(sorted((k, v) for k, v in merged.items() if not is_secret(k)))
        secret = tuple(sorted((k, v) for k, v in merged.items() if is_secret(k)))
        return cls(urlunsplit(parts), plain, secret)


def strip_user_info(uri: str) -> str:
    """``scheme://user:secret@host/...`` without ``user:secret@``, for messages."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))


def read_properties_file(path: Path) -> dict[str, str]:
    """``key=value`` lines; blank lines and ``#`` comments skipped. Owner-only if it holds a secret."""
    text = _read_private(path, PROPERTIES_FILE_ENV, required=False)
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{PROPERTIES_FILE_ENV} {path} line {number}: expected key=value")
        out[key.strip()] = value.strip()
    if any(is_secret(key) for key in out):
        _read_private(path, PROPERTIES_FILE_ENV, required=True)
    return out


def read_secret_file(env: Mapping[str, str], variable: str) -> str | None:
    """The secret in the file ``env[variable]`` names (owner-only), or None when the variable is unset."""
    if not env.get(variable):
        return None
    return _read_private(Path(env[variable]).expanduser(), variable, required=True).strip("\r\n") or None


def _read_private(path: Path, variable: str, *, required: bool) -> str:
    """A file's text; with ``required``, refused when group or others may read it (like ``~/.pgpass``)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {variable} {path}: {exc.strerror or exc}") from None
    if required and mode & 0o077:
        raise InputError(f"{variable} {path} holds a secret and is readable by others: chmod 600 {path}")
    return text


__all__ = ["PROPERTIES_FILE_ENV", "RestCatalogSettings", "is_secret", "strip_user_info"]
