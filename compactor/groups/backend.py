"""What a group store back-end provides: one document per group, changed atomically, and a clock of its own.

``transact(group, change)`` reads the group's document and the store's time, calls ``change(document, now)``,
and writes its answer back only if nobody wrote the group meanwhile (a compare-and-set), calling ``change``
again on the new document otherwise. ``change`` returns the new document (``None`` deletes the group,
``UNCHANGED`` writes nothing) and a result. Back-ends: ``groups.sql_backend`` (SQLite, PostgreSQL) and
``groups.object_backend`` (S3 with conditional writes, a local directory).

**One clock.** ``now`` is the store's: the database server's clock, the object store's response ``Date``, a
file system's modification time. Leases are judged on it and on nothing else, so hosts whose clocks disagree
still agree on who owns a partition. Tests replace it with ``clock`` (a callable returning milliseconds).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from compactor.errors import CommitConflictError

T = TypeVar("T")


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
Outcome = str | None | _Unchanged  # the new document, None to delete the group, or UNCHANGED
Change = Callable[[str | None, int], tuple[Outcome, T]]
Clock = Callable[[], int]

MAX_ATTEMPTS = 200  # compare-and-set rounds before giving up (members of one group racing for its document)


class Backend(Protocol):
    """A place that holds groups (see the module docstring)."""

    description: str  # for messages and ``group`` output: where the groups are (no credentials)
    fences_across_hosts: bool
    clock: Clock | None  # tests: replaces the store's own clock

    def transact(self, group: str, change: Change[T]) -> T: ...

    def read(self, group: str) -> tuple[str | None, int]:
        """The group's document (``None`` if it has none) and the store's time."""

    def documents(self) -> tuple[list[tuple[str, str]], int]:
        """Every group's ``(name, document)``, in name order, and the store's time."""

    def now_ms(self) -> int: ...

    def close(self) -> None: ...


def backoff(attempt: int) -> None:
    """A short randomised pause after a lost compare-and-set, growing with the attempts (at most 50 ms)."""
    time.sleep(random.uniform(0, min(0.05, 0.001 * (2 ** min(attempt, 6)))))


def conflict(description: str, group: str) -> CommitConflictError:
    return CommitConflictError(f"group '{group}' in {description} kept changing under this update "
                               f"({MAX_ATTEMPTS} attempts); try again")
