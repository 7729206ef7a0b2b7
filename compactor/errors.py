"""The product's exceptions: one base class, a few families, and messages a user can act on.

Each class also inherits the matching builtin (``ValueError``, ``LookupError``, ...) so callers can catch
either, and says whether retrying the same operation may succeed (``retryable``). The command line maps
``UsageError`` to exit status 2, ``OutcomeUnknownError`` to 75 and every other ``CompactorError`` to status 1
with its message. The families, each a class a caller can catch:

* ``InputError`` (``ValueError``): the call cannot be done as asked; fix the input, the name or the setting.
* ``NotFoundError`` (``LookupError``): something named is not there (``TopicExistsError``: it already is).
* ``TransientError``: a lost race or an outage; the same call may succeed later.
* ``AccessDeniedError`` (``PermissionError``): credentials were refused; fix them, retrying will not help.
* ``CursorCorruptError`` and ``TopicCorruptError``: durable state is malformed; nothing was changed.
* ``NotOwnerError``: a group member no longer owns what it read or commits.
* ``KafkaSourceError``: a mirror's Kafka source failed.
"""

from __future__ import annotations


class CompactorError(Exception):
    """Base class of every error this product raises on purpose."""

    retryable: bool = False
    exit_code: int = 1


# --- bad input: InputError -------------------------------------------------------------------------------


class InputError(CompactorError, ValueError):
    """The caller asked for something that cannot be done as asked."""


class UsageError(InputError):
    """Arguments that are well-formed for the parser but not for the verb (exit status 2, like argparse)."""

    exit_code = 2


class InvalidTopicNameError(InputError):
    """A topic name is not of the form ``namespace.topic`` or uses a reserved suffix."""


class NotATopicError(InputError):
    """The table exists but does not carry the topic marker (or its schema is not a topic's)."""


class InvalidSettingError(InputError):
    """A topic setting is unknown, malformed, out of range, or inconsistent with another."""


class PolicyError(InputError):
    """The topic's ``cleanup.policy`` does not allow the requested operation."""


class InvalidRecordError(InputError):
    """A record of a produce batch is malformed; carries its 1-based line (JSON Lines) or row number when known."""

    def __init__(self, message: str, line: int | None = None, unit: str = "line") -> None:
        self.line = line
        self.unit = unit
        super().__init__(f"{unit} {line}: {message}" if line is not None else message)


class BatchIdConflictError(InputError):
    """A batch id was re-sent with different records than the batch that committed under it."""


class CountMismatchError(InputError):
    """A DataFrame batch's written files do not match its counting pass: the DataFrame returned other rows, or
    placed them in other Spark partitions, when written than when counted (make it deterministic, for example
    by caching or checkpointing it). Nothing was written."""


class OffsetOutOfRangeError(InputError, IndexError):
    """A start position is outside what the view being read holds (Kafka's OffsetOutOfRange)."""


class GroupBusyError(InputError):
    """A group operation (``group reset``) was refused because members hold live leases (use ``--force``)."""


# --- not there: NotFoundError -------------------------------------------------------------------------------


class NotFoundError(CompactorError, LookupError):
    """Something named by the caller does not exist."""


class TopicNotFoundError(NotFoundError):
    """No table of that name exists in the catalog."""


class LakeNotFoundError(NotFoundError):
    """The warehouse (or its bucket) or the catalog named does not exist (only ``topic create`` makes a new
    lake; a bucket is never created)."""


class GroupNotFoundError(NotFoundError):
    """A consumer group named by the caller has no committed positions and no members (or was deleted)."""


class CursorExpiredError(NotFoundError):
    """An as-of read named a cursor that is no longer retained."""


class SnapshotExpiredError(NotFoundError):
    """A pinned snapshot is gone (the reader outlived its lease)."""


class DataFileMissingError(NotFoundError):
    """A data file the current snapshot of a topic names cannot be read, even after loading the table again."""


class MissingJarsError(NotFoundError):
    """The Spark jars are not where the set-up script puts them (run ``infra/setup.sh``)."""


# --- already there -----------------------------------------------------------------------------------------


class TopicExistsError(CompactorError, FileExistsError):
    """``topic create`` on a name that is already taken."""


# --- races and outages: TransientError ------------------------------------------------------------------------


class TransientError(CompactorError):
    """A failure that may go away if the operation is retried (a race, an outage)."""

    retryable = True


class CommitConflictError(TransientError):
    """A conditional commit lost the race with other writers: an append after its retry bound ("append
    conflict"), a compaction whose cursor another run replaced ("cursor moved"), retention or expiry. Nothing
    was committed; running the operation again is safe."""


class StorageUnavailableError(TransientError, ConnectionError):
    """The catalog or the object store could not be reached, or failed."""


class OutcomeUnknownError(TransientError):
    """A commit was sent but its result could not be learned; re-running the command is safe."""

    exit_code = 75

    def __init__(self, message: str) -> None:
        super().__init__(f"outcome unknown: {message}")


# --- refused credentials: AccessDeniedError ----------------------------------------------------------------


class AccessDeniedError(CompactorError, PermissionError):
    """Credentials were refused (not transient: fix the credentials or the permissions)."""


class StorageAccessDeniedError(AccessDeniedError):
    """The object store or the catalog refused the credentials."""


# --- integrity ----------------------------------------------------------------------------------------------


class CursorCorruptError(CompactorError):
    """The cursor names a snapshot that is missing or unreadable, or carries malformed metadata."""


class TopicCorruptError(CompactorError):
    """A topic's durable state (offsets, properties) is malformed."""


# --- group membership: NotOwnerError ---------------------------------------------------------------------------


class NotOwnerError(CompactorError):
    """A group member committed (or read for) a partition it does not own under a live lease: it was
    reassigned, or the member's ``session.timeout.ms`` lease expired. Nothing was changed."""


class FencedInstanceIdError(NotOwnerError):
    """Another process joined the group with this member's ``group.instance.id`` (or member id) and took its
    place (Kafka's ``FencedInstanceIdException``): this one must stop; it never takes the partitions back."""


# --- Kafka sources (compactor mirror): KafkaSourceError -----------------------------------------------------


class KafkaSourceError(CompactorError):
    """A mirror's Kafka source failed: unreachable, refusing the credentials, or lacking a topic."""


class KafkaAccessDeniedError(KafkaSourceError, AccessDeniedError):
    """A mirror's Kafka source refused the credentials (authentication or authorization)."""


class KafkaTopicNotFoundError(KafkaSourceError, LookupError):
    """A Kafka topic named to a mirror does not exist at the source."""


class SourceGapError(KafkaSourceError):
    """A mirror's Kafka source no longer holds the mirror's position (its retention overtook the mirror, or the
    topic was deleted and created again); ``--on-source-gap skip`` goes on past it, counting what it skips."""


# --- tests -----------------------------------------------------------------------------------------------------


class InjectedFailureError(CompactorError):
    """Raised at a named failure point enabled by a test (see ``compactor.failpoints``)."""


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the failed operation soon may succeed: a ``TransientError`` (a race, an outage, an
    unknown outcome). Anything else (bad settings, a corrupt cursor, refused credentials, and failures the
    product did not classify) is terminal until someone fixes its cause."""
    return isinstance(exc, CompactorError) and exc.retryable


# Earlier names, kept so that callers' ``except`` clauses keep working: each is the class it was folded into.
AppendConflictError = CommitConflictError  # an append lost a race for the raw table: a commit conflict
CursorMovedError = CommitConflictError  # the cursor moved under a run: a commit conflict
BucketNotFoundError = LakeNotFoundError  # the warehouse's bucket is missing: no lake there
