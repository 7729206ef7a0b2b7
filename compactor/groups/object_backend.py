"""Groups in an object store (S3, or anything speaking its conditional writes) or a local directory, with no
database: one object per group, changed by compare-and-set.

A change reads the group's object with its version tag (S3's ``ETag``), and writes it back only if the tag is
still the same (``If-Match``; ``If-None-Match: *`` for a new group); a lost race reads again. The store's clock is
the object store's own, its response ``Date`` (to the second), or for a directory the file system's time of a
file written just then. So any number of hosts share groups through one bucket with one clock, whatever the
Iceberg catalog is (a REST catalog included). A commit costs one read and one write of the group's object,
however long the group has lived.

``S3Objects`` speaks to S3 (``objects_s3``); ``LocalObjects`` keeps each object as numbered versions in a
directory, created with ``link`` (atomic create-if-absent), so processes on one host fence each other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol
from urllib.parse import quote

from compactor.groups.backend import MAX_ATTEMPTS, UNCHANGED, Change, Clock, T, backoff, conflict


class Objects(Protocol):
    """Objects with version tags and conditional writes (see the module docstring)."""

    description: str
    fences_across_hosts: bool

    def get(self, key: str) -> tuple[bytes | None, str | None, int]:
        """The object's bytes (``None`` if absent), its version tag, and the store's time in milliseconds."""

    def put(self, key: str, data: bytes, tag: str | None) -> bool:
        """Write ``data`` if the object's tag is still ``tag`` (``None``: only if absent); whether it did."""

    def delete(self, key: str, tag: str) -> bool:
        """Remove the object if its tag is still ``tag``; whether it did."""

    def names(self) -> list[str]: ...

    def now_ms(self) -> int: ...


def object_key(group: str) -> str:
    """A group's object name: its name quoted, shortened with a digest when long (file names are short)."""
    quoted = quote(group, safe="")
    if len(quoted) > 160:
        quoted = f"{quoted[:120]}-{hashlib.sha256(group.encode()).hexdigest()[:24]}"
    return f"{quoted}.json"


class ObjectBackend:
    """Groups as objects of ``objects`` (see the module docstring)."""

    def __init__(self, objects: Objects, *, clock: Clock | None = None) -> None:
        self.objects = objects
        self.clock = clock
        self.description = objects.description
        self.fences_across_hosts = objects.fences_across_hosts

    def _now(self, store_ms: int) -> int:
        return int(self.clock()) if self.clock is not None else store_ms

    def _read(self, group: str) -> tuple[str | None, str | None, int]:
        data, tag, now = self.objects.get(object_key(group))
        return (_state_of(data) if data else None), tag, self._now(now)

    def transact(self, group: str, change: Change[T]) -> T:
        key = object_key(group)
        for attempt in range(MAX_ATTEMPTS):
            document, tag, now = self._read(group)
            outcome, result = change(document, now)
            if outcome is UNCHANGED or (outcome is None and document is None):
                return result
            if outcome is None:
                assert tag is not None
                done = self.objects.delete(key, tag)
            else:
                assert isinstance(outcome, str)
                body = '{"group":' + json.dumps(group) + ',"state":' + outcome + "}"
                done = self.objects.put(key, body.encode(), tag)
            if done:
                return result
            backoff(attempt)
        raise conflict(self.description, group)

    def read(self, group: str) -> tuple[str | None, int]:
        document, _, now = self._read(group)
        return document, now

    def documents(self) -> tuple[list[tuple[str, str]], int]:
        found = []
        for key in self.objects.names():
            data, _, _ = self.objects.get(key)
            if data:
                parsed = json.loads(data)
                found.append((str(parsed["group"]), json.dumps(parsed["state"])))
        return sorted(found), self.now_ms()

    def now_ms(self) -> int:
        return self._now(self.objects.now_ms() if self.clock is None else 0)

    def close(self) -> None:
        pass


def _state_of(data: bytes) -> str:
    return json.dumps(json.loads(data)["state"])

