"""``LocalObjects``: objects with version tags in a local directory (``groups.object_backend``).

Each object is one file whose first line is its version. A conditional write takes the object's lock file
(``flock``), checks the version is still the one the writer read, and replaces the file by an atomic rename of a
fully written temporary file (the file and then the directory synced to disk), so readers (who take no lock)
see the old object or the new one, never a part of either, and a write that returned survives a crash. Locks
are the host's: a directory fences the processes of one host. The clock is the file system's, the modification
time of a file written just then.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path


class LocalObjects:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = f"the directory {root}"
        self.fences_across_hosts = False  # flock and rename fence the processes of one host
        root.mkdir(parents=True, exist_ok=True)
        (root / ".clock").mkdir(exist_ok=True)
        (root / ".locks").mkdir(exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key

    @staticmethod
    def _read(path: Path) -> tuple[bytes | None, str | None]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, None
        version, _, body = data.partition(b"\n")
        return body, version.decode()

    def get(self, key: str) -> tuple[bytes | None, str | None, int]:
        data, tag = self._read(self._path(key))
        return data, tag, self.now_ms()

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        with open(self.root / ".locks" / key, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def put(self, key: str, data: bytes, tag: str | None) -> bool:
        path = self._path(key)
        with self._locked(key):
            if self._read(path)[1] != tag:
                return False
            version = int(tag) + 1 if tag is not None else 1
            temporary = self.root / f".tmp-{uuid.uuid4().hex}"
            with open(temporary, "wb") as out:
                out.write(f"{version}\n".encode() + data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
            _sync_directory(self.root)  # the rename itself is durable before the write counts as done
        return True

    def delete(self, key: str, tag: str) -> bool:
        path = self._path(key)
        with self._locked(key):
            if self._read(path)[1] != tag:
                return False
            path.unlink()
            _sync_directory(self.root)
        return True

    def names(self) -> list[str]:
        return sorted(name for name in os.listdir(self.root) if not name.startswith("."))

    def now_ms(self) -> int:
        probe = self.root / ".clock" / f"{os.getpid()}-{threading.get_ident()}"
        with open(probe, "wb") as out:
            out.write(b"t")
        return os.stat(probe).st_mtime_ns // 1_000_000


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
