"""moto's S3 server for the test session: started once on a free loopback port, stopped at the end.

``s3_server`` yields an ``S3Server`` whose ``env`` holds the standard AWS variables pointing at it, and which
can create buckets and be stopped and restarted on the same port (to simulate an endpoint going away).
"""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"
REGION = "us-east-1"


_conditional = threading.Lock()


def atomic_conditional_writes() -> None:
    """Make moto's conditional writes atomic, as S3's are. moto checks ``If-Match`` / ``If-None-Match`` and then
    writes, with nothing between its server threads, so two racing writers could both pass the check on one
    version (a lost update that S3 never allows; the group store's race test met it). Here a lock holds every
    conditional ``PutObject`` / ``DeleteObject`` from its check to its write. Idempotent."""
    from moto.s3.responses import S3Response

    for name in ("put_object", "delete_object"):
        method: Callable[..., Any] = getattr(S3Response, name)  # moto's handlers (a KeyError here: moto changed)
        if getattr(method, "atomic_conditions", False):
            continue

        @functools.wraps(method)
        def atomic(self: Any, *args: Any, __method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            if "If-Match" in self.headers or "If-None-Match" in self.headers:
                with _conditional:
                    return __method(self, *args, **kwargs)
            return __method(self, *args, **kwargs)

        atomic.atomic_conditions = True  # type: ignore[attr-defined]
        setattr(S3Response, name, atomic)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Server:
    """One moto S3 server on ``port``."""

    port: int
    server: Any = None
    buckets: set[str] = field(default_factory=set)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        atomic_conditional_writes()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        for bucket in sorted(self.buckets):  # moto keeps state in-process; recreate only if missing
            self.create_bucket(bucket)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def create_bucket(self, name: str) -> None:
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if name not in existing:
            client.create_bucket(Bucket=name)
        self.buckets.add(name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        return [obj["Key"] for page in paginator.paginate(Bucket=bucket, Prefix=prefix)
                for obj in page.get("Contents", [])]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server(free_port())
    server.start()
    yield server
    server.stop()
