"""Every back-end without a JVM: the command line's JVM-free verbs on each back-end (``tests/backends.py``),
and the storage's own errors (a missing bucket, refused credentials, an unreachable catalog database) as
clear typed errors that leave nothing half-created. (The Spark scenarios are in test_e2e.py.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from compactor.cli.main import main
from compactor.errors import LakeNotFoundError, StorageAccessDeniedError, StorageUnavailableError
from compactor.lake import Lake
from tests.backends import Backend
from tests.conftest import new_lake_config
from tests.s3_server import S3Server, free_port


def test_the_command_line_on_each_backend(backend: Backend, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM-free verbs, configured the way a user configures them: options for the warehouse and the
    catalog, the standard AWS variables for S3 (set by the fixture)."""
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", backend.lake.config.catalog_name)
    base = ["--warehouse", backend.warehouse, "--catalog-uri", backend.catalog_uri]

    def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main([*base, *args])
        out, err = capsys.readouterr()
        return code, out, err

    assert run("topic", "create", "cli.t", "--partitions", "2")[0] == 0
    code, _, err = run("produce", "cli.t", stdin='{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n')
    assert code == 0, err
    code, out, err = run("read", "cli.t", "--raw")
    assert code == 0, err
    assert sorted(json.loads(line)["key"] for line in out.splitlines()) == ["a", "b"]
    code, out, _ = run("status", "cli.t", "--json")
    assert code == 0 and sum(json.loads(out)["next_offsets"].values()) == 2


# --- the storage's errors ------------------------------------------------------------------------------------


def test_missing_bucket_is_a_clear_error(s3_server: S3Server, tmp_path: Path) -> None:
    config = new_lake_config("s3://no-such-bucket/lake", str(tmp_path / "catalog.db"), **s3_server.env)
    lake = Lake(config)
    with pytest.raises(LakeNotFoundError, match="no-such-bucket"):
        lake.create_topic("m.t")
    assert lake.list_topics() == [], "nothing half-created"


@pytest.mark.s3  # its own moto server, which checks credentials
def test_wrong_credentials_are_a_clear_error(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}  # this moto server checks credentials
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        bad = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "wrong",
               "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_REGION": "us-east-1"}
        lake = Lake(new_lake_config("s3://any-bucket/lake", str(tmp_path / "catalog.db"), **bad))
        with pytest.raises(StorageAccessDeniedError, match="access denied"):
            lake.create_topic("w.t")
        assert lake.list_topics() == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_unreachable_catalog_is_a_clear_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    lake = Lake(new_lake_config(str(tmp_path / "wh"), f"postgresql://compactor@127.0.0.1:{port}/catalog"))
    with pytest.raises(StorageUnavailableError, match="cannot open the catalog database") as caught:
        lake.create_topic("c.t")
    assert f"{port}" in str(caught.value) or "connect" in str(caught.value).lower()
    with pytest.raises(StorageUnavailableError):
        lake.list_topics()
