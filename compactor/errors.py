"""The product's exceptions: one base class, a few families, and messages a user can act on.

Each class also inherits the matching builtin (``ValueError``, ``LookupError``, ...) so callers can catch
either, and says whether retrying the same operation may succeed (``retryable``). The command line maps
``OutcomeUnknownError`` to exit status 75 and every other ``CompactorError`` to status 1 with its message.
"""

from __future__ import annotations


class CompactorError(Exception):
    """Base class of every error this product raises on purpose."""

    retryable: bool = False
    exit_code: int = 1


class TransientError(CompactorError):
    """A failure that may go away if the operation is retried (a race, an outage)."""

    retryable = True


# --- bad input -----------------------------------------------------------------------------------


class InputError(CompactorError, ValueError):
    """The caller asked for something that cannot be done as asked."""


class InvalidTopicNameError(InputError):
    """A topic name is not of the form ``namespace.topic`` or uses a reserved suffix."""


class InvalidSettingError(InputError):
    """A topic setting is unknown, malformed, out of range, or inconsistent with another."""


class InvalidRecordError(InputError):
    """A record of a produce batch is malformed; carries its 1-based line (JSON Lines) or row number when known."""

    def __init__(self, message: str, line: int | None = None, unit: str = "line") -> None:
        self.line = line
        self.unit = unit
        super().__init__(f"{unit} {line}: {message}" if line is not None else message)


class BatchIdConflictError(InputError):
    """A batch id was re-sent with different records than the batch that committed under it."""


class OffsetOutOfRangeError(InputError, IndexError):
    """A start position is outside what the view being read holds (Kafka's OffsetOutOfRange)."""


class UsageError(InputError):
    """Arguments that are well-formed for the parser but not for the verb (exit status 2, like argparse)."""

    exit_code = 2


class PolicyError(InputError):
    """The topic's ``cleanup.policy`` does not allow the requested operation."""


# --- things that are not there ---------------------------------------------------------------------


class NotFoundError(CompactorError, LookupError):
    """Something named by the caller does not exist."""


class TopicNotFoundError(NotFoundError):
    """No table of that name exists in the catalog."""


class LakeNotFoundError(NotFoundError):
    """The warehouse or catalog named does not exist (only ``topic create`` makes a new lake)."""


class NotATopicError(InputError):
    """The table exists but does not carry the topic marker (or its schema is not a topic's)."""


class TopicExistsError(CompactorError, FileExistsError):
    """``topic create`` on a name that is already taken."""


class CursorExpiredError(NotFoundError):
    """An as-of read named a cursor that is no longer retained."""


class SnapshotExpiredError(NotFoundError):
    """A pinned snapshot is gone (the reader outlived its lease)."""


class DataFileMissingError(NotFoundError):
    """A data file the current snapshot of a topic names cannot be read, even after loading the table again."""


class GroupNotFoundError(NotFoundError):
    """A consumer group named by the caller has no committed positions and no members (or was deleted)."""


class MissingJarsError(NotFoundError):
    """The Spark jars are not where the set-up script puts them (run ``infra/setup.sh``)."""


# --- integrity ---------------------------------------------------------------------------------------


class CursorCorruptError(CompactorError):
    """The cursor names a snapshot that is missing or unreadable, or carries malformed metadata."""


class TopicCorruptError(CompactorError):
    """A topic's durable state (offsets, properties) is malformed."""


class NotOwnerError(CompactorError):
    """A group member committed (or read for) a partition it does not own under a live lease: it was
    reassigned, or the member's ``session.timeout.ms`` lease expired. Nothing was changed."""


class FencedInstanceIdError(NotOwnerError):
    """Another process joined the group with this member's ``group.instance.id`` (or member id) and took its
    place (Kafka's ``FencedInstanceIdException``): this one must stop; it never takes the partitions back."""


class GroupBusyError(InputError):
    """A group operation (``group reset``) was refused because members hold live leases (use ``--force``)."""


# --- races and outages ------------------------------------------------------------------------------------


class AppendConflictError(TransientError):
    """An append kept losing the race with other appenders and gave up after its retry bound."""


class CursorMovedError(TransientError):
    """Another compaction published a cursor after this run pinned its own."""


class CommitConflictError(TransientError):
    """A conditional commit failed because the table changed underneath it."""


class StorageUnavailableError(TransientError, ConnectionError):
    """The catalog database or the object store could not be reached or refused the credentials."""


class StorageAccessDeniedError(CompactorError, PermissionError):
    """The object store or catalog refused the credentials (not transient: fix the credentials)."""


class BucketNotFoundError(NotFoundError):
    """The warehouse's bucket does not exist."""


class OutcomeUnknownError(TransientError):
    """A commit was sent but its result could not be learned; re-running the command is safe."""

    exit_code = 75

    def __init__(self, message: str) -> None:
        super().__init__(f"outcome unknown: {message}")


# --- Kafka sources (compactor mirror) -----------------------------------------------------------------------


class KafkaSourceError(CompactorError):
    """A mirror's Kafka source failed: unreachable, refusing the credentials, or lacking a topic."""


class KafkaAccessDeniedError(KafkaSourceError, PermissionError):
    """A mirror's Kafka source refused the credentials (authentication or authorization)."""


class KafkaTopicNotFoundError(KafkaSourceError, LookupError):
    """A Kafka topic named to a mirror does not exist at the source."""


class SourceGapError(KafkaSourceError):
    """A mirror's Kafka source no longer holds the mirror's position (its retention overtook the mirror, or the
    topic was deleted and created again); ``--on-source-gap skip`` goes on past it, counting what it skips."""


class InjectedFailureError(CompactorError):
    """Raised at a named failure point enabled by a test (see ``compactor.failpoints``)."""


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the failed operation soon may succeed: a ``TransientError`` (a race, an outage, an
    unknown outcome). Anything else (bad settings, a corrupt cursor, refused credentials, and failures the
    product did not classify) is terminal until someone fixes its cause."""
    return isinstance(exc, CompactorError) and exc.retryable
