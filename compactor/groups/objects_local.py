"""``LocalObjects``: objects with version tags in a local directory (``groups.object_backend``).

Each object is a directory of numbered versions; the tag is the newest number. A write creates the next number
with ``link`` (atomic, and it fails if the name exists), so of two writers from the same version exactly one
wins; a delete writes an empty version (a tombstone). Older versions are removed after each write (a reader
that finds the version it listed gone lists again). The clock is the file system's: the modification time of a
file written just then (on a network file system, the file server's clock)."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from pathlib import Path

VERSION_DIGITS = 16


class LocalObjects:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = f"the directory {root}"
        self.fences_across_hosts = False  # link() is atomic on one host; other hosts are not measured here
        root.mkdir(parents=True, exist_ok=True)
        (root / ".clock").mkdir(exist_ok=True)

    def _dir(self, key: str) -> Path:
        return self.root / f"{key}.d"

    @staticmethod
    def _versions(directory: Path) -> list[int]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def get(self, key: str) -> tuple[bytes | None, str | None, int]:
        directory = self._dir(key)
        while True:
            versions = self._versions(directory)
            now = self.now_ms()
            if not versions:
                return None, None, now
            try:
                data = (directory / f"{versions[-1]:0{VERSION_DIGITS}d}").read_bytes()
            except FileNotFoundError:  # pruned after a newer version landed: list again
                continue
            return (data or None), str(versions[-1]), now

    def put(self, key: str, data: bytes, tag: str | None) -> bool:
        directory = self._dir(key)
        directory.mkdir(exist_ok=True)
        version = int(tag) + 1 if tag is not None else 1
        temporary = directory / f".tmp-{uuid.uuid4().hex}"
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, directory / f"{version:0{VERSION_DIGITS}d}")
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        for old in self._versions(directory):
            if old < version - 1:
                with contextlib.suppress(FileNotFoundError):
                    (directory / f"{old:0{VERSION_DIGITS}d}").unlink()
        return True

    def delete(self, key: str, tag: str) -> bool:
        return self.put(key, b"", tag)

    def names(self) -> list[str]:
        return sorted(name[:-2] for name in os.listdir(self.root) if name.endswith(".d"))

    def now_ms(self) -> int:
        probe = self.root / ".clock" / f"{os.getpid()}-{threading.get_ident()}"
        with open(probe, "wb") as out:
            out.write(b"t")
        return os.stat(probe).st_mtime_ns // 1_000_000
