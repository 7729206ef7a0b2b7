"""pyiceberg's ``RestCatalog`` on an Iceberg REST catalog, and what its failures mean.

The catalog is opened with the properties of ``compactor.rest_catalog`` (warehouse name, OAuth2 client
credentials or a bearer token, extra headers, timeouts), plus the S3 settings of the standard AWS variables;
storage credentials the catalog vends with a table override those in that table's file IO (pyiceberg merges a
table's ``config`` over the catalog's properties). Every request has the configured timeouts
(``iceberg.internals.LakeRestCatalog``; pyiceberg sets none, so a server that stops answering would hang it).

Failures, as the product reports them (``rest_failure``): a refused connection or a timeout is the catalog being
unavailable; 401 (and a refused OAuth2 exchange) is refused credentials; 403 is an operation the credentials may
not do; 5xx and 429 are the catalog being unavailable. For a commit (``commit_never_sent``, ``commit_in_flight``):
a request that never reached the server changed nothing; one that timed out or lost its connection after it
was sent may still land, so unless the table shows it landed its outcome is unknown.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

from pyiceberg.exceptions import (
    AuthorizationExpiredError,
    BadRequestError,
    CommitStateUnknownException,
    ForbiddenError,
    OAuthError,
    RESTError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
)

from compactor.config import LakeConfig
from compactor.errors import LakeNotFoundError, StorageAccessDeniedError, StorageUnavailableError
from compactor.iceberg.internals import LakeRestCatalog
from compactor.rest_catalog import CONNECT_TIMEOUT, SOCKET_TIMEOUT, RestCatalogSettings

AUTH_VARIABLES = ("COMPACTOR_REST_CREDENTIAL, COMPACTOR_REST_TOKEN (or their _FILE variables) or "
                  "COMPACTOR_REST_PROPERTIES_FILE")


def rest_properties(settings: RestCatalogSettings, s3: dict[str, str]) -> dict[str, str]:
    """pyiceberg's catalog properties: the S3 settings first (a table's vended ones override them), then the
    catalog's properties and secrets."""
    return {**s3, "uri": settings.uri, **settings.plain, **settings.secret}


def open_rest_catalog(config: LakeConfig, s3: dict[str, str]) -> LakeRestCatalog:
    """Open the REST catalog of ``config`` (its ``/v1/config`` answers, with the credentials accepted)."""
    settings = config.catalog.rest
    assert settings is not None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LakeRestCatalog(config.catalog_name, connect_timeout_s=settings.timeout_s(CONNECT_TIMEOUT),
                                   read_timeout_s=settings.timeout_s(SOCKET_TIMEOUT),
                                   **rest_properties(settings, s3))
    except BadRequestError as exc:
        raise LakeNotFoundError(f"no lake at {config.describe()}: the catalog refused the warehouse "
                                f"({detail(exc)}); check COMPACTOR_REST_WAREHOUSE") from exc
    except RESTError as exc:
        if _status(exc) == 404:
            raise LakeNotFoundError(f"no lake at {config.describe()}: the catalog has no such warehouse "
                                    f"({detail(exc)}); check COMPACTOR_REST_WAREHOUSE") from exc
        raise _opening_failure(settings, exc) from exc
    except OSError as exc:
        raise _opening_failure(settings, exc) from exc


def _opening_failure(settings: RestCatalogSettings, exc: BaseException) -> Exception:
    action = f"opening the {settings.describe()}"
    return rest_failure(action, exc, settings) or StorageUnavailableError(f"{action}: {detail(exc)}")


def rest_failure(action: str, exc: BaseException, settings: RestCatalogSettings | None = None) -> Exception | None:
    """The product's error for a REST catalog's failure (module docstring), or None if ``exc`` is none."""
    if not _from_rest_client(exc):
        return None
    where = f"the REST catalog {settings.uri}" if settings is not None else "the REST catalog"
    text = detail(exc)
    for error in exception_chain(exc):
        if isinstance(error, UnauthorizedError | OAuthError | AuthorizationExpiredError):
            return StorageAccessDeniedError(f"{action}: access denied: {where} refused the credentials (HTTP 401; "
                                            f"check {AUTH_VARIABLES}): {text}")
        if isinstance(error, ForbiddenError):
            return StorageAccessDeniedError(f"{action}: access denied: {where} does not allow these credentials "
                                            f"to do this (HTTP 403): {text}")
        if isinstance(error, ServiceUnavailableError | ServerError | TooManyRequestsError
                      | CommitStateUnknownException):
            return StorageUnavailableError(f"{action}: storage unavailable: {where} failed ({text})")
    if _connect_failure(exc):
        return StorageUnavailableError(f"{action}: storage unavailable: cannot connect to {where} ({text})")
    if _type_names(exc) & {"ReadTimeout", "Timeout", "ConnectionError", "ChunkedEncodingError"}:
        return StorageUnavailableError(f"{action}: storage unavailable: {where} did not answer ({text})")
    return None


def commit_never_sent(exc: BaseException) -> bool:
    """Whether a failed commit certainly changed nothing: no connection was made, or the catalog refused it
    before handling it (401, 403, 400)."""
    refused = (UnauthorizedError, OAuthError, ForbiddenError, BadRequestError)
    return _from_rest_client(exc) and (_connect_failure(exc) or any(isinstance(e, refused)
                                                                    for e in exception_chain(exc)))


def commit_in_flight(exc: BaseException) -> bool:
    """Whether a failed commit was sent and may still be applied by the server: its answer timed out or its
    connection was lost after sending. (A 5xx answer means the server finished with it.)"""
    return _from_rest_client(exc) and not _connect_failure(exc) and bool(
        _type_names(exc) & {"ReadTimeout", "Timeout", "ConnectionError", "ChunkedEncodingError"})


def detail(exc: BaseException) -> str:
    """A short description of a REST failure: the server's message, or the connection problem."""
    for error in exception_chain(exc):
        reason = getattr(error, "reason", None) or (error.args[0] if error.args else None)
        inner = getattr(reason, "reason", None)
        for candidate in (inner, reason):
            text = str(candidate) if candidate is not None else ""
            for marker in ("Connection refused", "timed out", "Name or service not known", "Connection reset",
                           "Remote end closed connection"):
                if marker in text:
                    return marker.lower()
    lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    return lines[0][:300]


def _from_rest_client(exc: BaseException) -> bool:
    """Whether ``exc`` comes from pyiceberg's REST client (its errors, or ``requests``, which only it uses here)."""
    return any(isinstance(e, RESTError) or type(e).__module__.split(".")[0] == "requests" for e in exception_chain(exc))


def _status(exc: RESTError) -> int | None:
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if code is not None else None


def _connect_failure(exc: BaseException) -> bool:
    names = _type_names(exc)
    return bool(names & {"ConnectTimeout", "NewConnectionError", "ConnectTimeoutError", "NameResolutionError"})


def _type_names(exc: BaseException) -> set[str]:
    names: set[str] = set()
    for error in exception_chain(exc):
        names.update(t.__name__ for t in type(error).__mro__)
        for arg in error.args:
            if isinstance(arg, BaseException):
                names.update(t.__name__ for t in type(arg).__mro__)
                reason = getattr(arg, "reason", None)
                if isinstance(reason, BaseException):
                    names.update(t.__name__ for t in type(reason).__mro__)
    return names


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes and contexts, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


__all__ = ["commit_in_flight", "commit_never_sent", "detail", "exception_chain", "open_rest_catalog", "rest_failure",
           "rest_properties"]
