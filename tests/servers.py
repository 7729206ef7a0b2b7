"""The JVM servers the tests need, started by the project's own scripts and stopped by their process ids.

* ``kafka_broker``: one Kafka broker for the whole test run (``infra/kafka-server.sh``);
* ``rest_catalog``: one Iceberg REST catalog server for the whole test run (``infra/rest-catalog-server.sh``);
* ``kafka_connect``: one Kafka Connect worker with Iceberg's sink on that broker (``infra/kafka-connect.sh``).

Both are session-scoped; conftest.py puts every test that uses them on the worker that holds the SparkSession
(one xdist group), so a parallel run still starts one of each. A missing jar set is an error that names the
set-up step, never a skip: the test command installs every set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 30


def start_server(script: str, directory: Path, *args: str, env: Mapping[str, str] | None = None,
                 key: str, values: dict[str, str] | None = None) -> tuple[str, int]:
    """Run ``infra/<script>`` for ``directory``; return the value of its first output line ``key=VALUE`` and the
    process id it wrote (and put every ``KEY=VALUE`` line it printed in ``values``)."""
    done = subprocess.run([str(ROOT / "infra" / script), str(directory), *args], check=False, capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"infra/{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    first = done.stdout.splitlines()[0]
    name, _, value = first.partition("=")
    if values is not None:
        values.update(line.partition("=")[::2] for line in done.stdout.splitlines() if "=" in line)
    assert name == key, f"infra/{script} printed {first!r} first, expected {key}=..."
    pid_file = {"kafka-server.sh": "kafka.pid", "rest-catalog-server.sh": "rest.pid",
                "kafka-connect.sh": "connect.pid"}[script]
    return value, int((directory / pid_file).read_text())


def stop_server(pid: int) -> None:
    """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; returns once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class KafkaBroker:
    """A running broker: its bootstrap address, directory (data, logs) and process id, and a second listener that
    takes SASL/PLAIN with one user (``sasl_user``, ``sasl_password``), for credentials a source refuses."""

    bootstrap: str
    directory: Path
    pid: int
    sasl_bootstrap: str | None = None
    sasl_user: str = "mirror"
    sasl_password: str = ""


@dataclass(frozen=True)
class RestCatalog:
    """A running REST catalog server: its URI, state directory, warehouse and process id, and the credentials it
    accepts: every request carries ``token`` (or ``read_token``, which may only read: 403 on writes), which
    OAuth2's client credentials (``client_id``, ``client_secret``) are exchanged for at ``/v1/oauth/tokens``."""

    uri: str
    directory: Path
    warehouse: Path
    pid: int
    token: str
    read_token: str
    client_id: str
    client_secret: str
    header: tuple[str, str]  # a header every request must carry (403 otherwise): the extra headers' test

    @property
    def client_properties(self) -> dict[str, str]:
        """What a pyiceberg client needs besides its credentials: the required header."""
        return {f"header.{self.header[0]}": self.header[1]}

    def inject(self, *rules: str) -> None:
        """Fault rules for the server (``METHOD PATH-REGEX status=CODE|delay-before=MS|delay-after=MS``); none
        clears them. The server reads them at every request."""
        path = self.directory / "faults"
        partial = path.with_suffix(".partial")
        partial.write_text("".join(f"{rule}\n" for rule in rules))
        partial.replace(path)

    def create_warehouse(self, name: str | None = None) -> str:
        """A new warehouse with a catalog of its own (as an administrator makes a Polaris catalog); its name."""
        name = name or f"w{uuid.uuid4().hex[:12]}"
        (self.directory / "warehouses" / name).mkdir(parents=True)
        return name

    def lake_env(self, warehouse: str, *, auth: str = "credential", **properties: str) -> dict[str, str]:
        """The environment that points the product at ``warehouse`` of this server (``auth``: ``credential``,
        OAuth2 client credentials; ``token``, the bearer token; ``read``, the token that may only read), with the
        required header and any other catalog ``properties`` in a properties file readable by its owner only."""
        env = {"COMPACTOR_CATALOG_URI": self.uri, "COMPACTOR_REST_WAREHOUSE": warehouse}
        if auth == "credential":
            env["COMPACTOR_REST_CREDENTIAL"] = f"{self.client_id}:{self.client_secret}"
        else:
            env["COMPACTOR_REST_TOKEN"] = self.token if auth == "token" else self.read_token
        path = self.directory / f"client-{uuid.uuid4().hex[:12]}.properties"
        lines = {**self.client_properties, **properties}
        path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        path.chmod(0o600)
        env["COMPACTOR_REST_PROPERTIES_FILE"] = str(path)
        return env

    @contextlib.contextmanager
    def requests_logged(self, path_regex: str) -> Iterator[list[str]]:
        """The POST requests whose path matches ``path_regex`` while the block runs (``"POST PATH BODY"``), in the
        list it yields once the block has ended."""
        log, switch = self.directory / "requests.log", self.directory / "request-log"
        log.unlink(missing_ok=True)
        switch.write_text(path_regex)
        lines: list[str] = []
        try:
            yield lines
        finally:
            switch.unlink()
            lines.extend(log.read_text().splitlines() if log.exists() else [])


@dataclass(frozen=True)
class KafkaConnect:
    """A running Kafka Connect worker: its REST API's URL, directory and process id."""

    url: str
    directory: Path
    pid: int

    def request(self, method: str, path: str, body: object = None) -> object:
        """One call of the worker's REST API; the decoded JSON answer (None when empty)."""
        import json
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            text = answer.read()
        return json.loads(text) if text else None


# Broker settings for tests: the log cleaner looks for work every 200 ms instead of every 15 s, so that a test
# waits for Kafka's own compaction in seconds.
KAFKA_TEST_CONFIG = ("log.cleaner.backoff.ms=200",)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    directory = tmp_path_factory.mktemp("kafka")
    args = [a for setting in KAFKA_TEST_CONFIG for a in ("--config", setting)]
    password = f"pw-{uuid.uuid4().hex}"
    values: dict[str, str] = {}
    bootstrap, pid = start_server("kafka-server.sh", directory, *args, key="bootstrap", values=values,
                                  env={"KAFKA_SASL_PLAIN_USERS": f"mirror:{password}"})
    try:
        yield KafkaBroker(bootstrap, directory, pid, values["sasl_bootstrap"], "mirror", password)
    finally:
        stop_server(pid)


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalog]:
    directory = tmp_path_factory.mktemp("rest-catalog")
    header = ("X-Compactor-Test", f"header-{uuid.uuid4().hex}")
    secrets = {"REST_CATALOG_TOKEN": f"token-{uuid.uuid4().hex}", "REST_CATALOG_READ_TOKEN": f"read-{uuid.uuid4().hex}",
               "REST_CATALOG_CLIENT_ID": "compactor-tests", "REST_CATALOG_CLIENT_SECRET": f"secret-{uuid.uuid4().hex}",
               "REST_CATALOG_REQUIRED_HEADER": f"{header[0]}: {header[1]}"}
    uri, pid = start_server("rest-catalog-server.sh", directory, key="uri", env=secrets)
    try:
        yield RestCatalog(uri, directory, directory / "warehouse", pid, secrets["REST_CATALOG_TOKEN"],
                          secrets["REST_CATALOG_READ_TOKEN"], secrets["REST_CATALOG_CLIENT_ID"],
                          secrets["REST_CATALOG_CLIENT_SECRET"], header)
    finally:
        stop_server(pid)


@pytest.fixture(scope="session")
def kafka_connect(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnect]:
    directory = tmp_path_factory.mktemp("kafka-connect")
    url, pid = start_server("kafka-connect.sh", directory, "--bootstrap", kafka_broker.bootstrap, key="url")
    try:
        yield KafkaConnect(url, directory, pid)
    finally:
        stop_server(pid)
