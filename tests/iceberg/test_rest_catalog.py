"""An Iceberg REST catalog, against Iceberg's own REST catalog server (``tests/servers.py``): where its
settings and secrets come from, the warehouse name, tokens and client credentials and extra headers, and every
outage or refusal as a clear error that changes nothing: a refused connection, 401, 403, 5xx, and a commit whose
answer never comes ("outcome unknown", exit 75, unless the table shows that it landed).

Every request to the session's server must carry a header (``RestCatalog.header``): every REST test sends it from
a properties file (``lake_env``), so the extra headers are tested by every test that gets an answer.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compactor.cli.main import main
from compactor.config import LakeConfig
from compactor.errors import (
    InputError,
    LakeNotFoundError,
    OutcomeUnknownError,
    StorageAccessDeniedError,
    StorageUnavailableError,
)
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.conftest import new_lake_config
from tests.s3_server import free_port
from tests.servers import RestCatalog, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"rest.client.socket-timeout-ms": "1000"}  # for the tests of answers that never come


def rest_lake(rest: RestCatalog, warehouse: str | None = None, *, auth: str = "credential",
              **properties: str) -> tuple[Lake, dict[str, str]]:
    env = rest.lake_env(warehouse or rest.create_warehouse(), auth=auth, **properties)
    return Lake(new_lake_config("", rest.uri, **env)), env


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str,
        stdin: str | None = None) -> tuple[int, str, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def records(lake: Lake, name: str) -> list[tuple[int, int, bytes | None]]:
    return [(r.partition, r.offset, r.value) for r in TopicReader(lake, name).records()]


# --- settings: from the environment or a file, never shown -----------------------------------------------------


def test_settings_come_from_variables_and_files_and_secrets_stay_apart(tmp_path: Path) -> None:
    properties = tmp_path / "rest.properties"
    properties.write_text("# Polaris\nwarehouse=from-file\nscope=PRINCIPAL_ROLE:ALL\nheader.X-Tenant=acme\n"
                          "rest.sigv4-enabled=false\n")
    properties.chmod(0o600)
    credential = tmp_path / "credential"
    credential.write_text("client:s3cr3t-from-file\n")
    credential.chmod(0o600)
    env = {"COMPACTOR_REST_PROPERTIES_FILE": str(properties), "COMPACTOR_REST_WAREHOUSE": "from-env",
           "COMPACTOR_REST_CREDENTIAL_FILE": str(credential)}
    config = LakeConfig.resolve(catalog_uri="https://catalog.example/api/catalog", env=env)
    rest = config.catalog.rest
    assert rest is not None and config.is_rest and config.warehouse == ""  # the catalog places the tables
    assert rest.warehouse == "from-env"  # a variable wins over the file
    assert rest.plain["scope"] == "PRINCIPAL_ROLE:ALL" and rest.plain["rest.sigv4-enabled"] == "false"
    assert rest.secret == {"credential": "client:s3cr3t-from-file", "header.X-Tenant": "acme"}
    assert rest.plain["oauth2-server-uri"] == "https://catalog.example/api/catalog/v1/oauth/tokens"
    shown = repr(config) + config.describe() + str(config.catalog)
    assert "s3cr3t" not in shown and "acme" not in shown
    assert "https://catalog.example/api/catalog" in config.describe() and "from-env" in config.describe()

    from compactor.spark.catalog import catalog_settings, credential_settings

    startup = catalog_settings(config)  # what may reach a JVM's command line
    assert startup["spark.sql.catalog.lake.type"] == "rest"
    assert startup["spark.sql.catalog.lake.warehouse"] == "from-env"
    assert "s3cr3t" not in json.dumps(startup) and "acme" not in json.dumps(startup)
    assert credential_settings(config)["spark.sql.catalog.lake.credential"] == "client:s3cr3t-from-file"
    # a warehouse location, when given, is where the product puts its tables
    located = LakeConfig.resolve(warehouse=str(tmp_path / "wh"), catalog_uri="http://127.0.0.1:1/", env={})
    assert located.warehouse == f"file://{tmp_path / 'wh'}"


def test_bad_rest_settings_are_refused_with_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="must not carry credentials") as caught:
        LakeConfig.resolve(catalog_uri="https://user:hunter2@catalog.example/", env={})
    assert "hunter2" not in str(caught.value)
    with pytest.raises(InputError, match="client_id:client_secret"):
        LakeConfig.resolve(catalog_uri="https://catalog.example/", env={"COMPACTOR_REST_CREDENTIAL": "no-colon"})
    shared = tmp_path / "shared.properties"
    shared.write_text("token=abc\n")
    shared.chmod(0o644)
    with pytest.raises(InputError, match="readable by others: chmod 600"):
        LakeConfig.resolve(catalog_uri="https://catalog.example/", env={"COMPACTOR_REST_PROPERTIES_FILE": str(shared)})
    with pytest.raises(InputError, match="positive number of milliseconds"):
        LakeConfig.resolve(catalog_uri="https://catalog.example/",
                           env={"COMPACTOR_REST_PROPERTIES_FILE": str(_private(tmp_path, "x=1\n"
                                                                                "rest.client.socket-timeout-ms=0\n"))})
    with pytest.raises(InputError, match="cannot read COMPACTOR_REST_TOKEN_FILE"):
        LakeConfig.resolve(catalog_uri="https://catalog.example/",
                           env={"COMPACTOR_REST_TOKEN_FILE": str(tmp_path / "missing")})


def _private(directory: Path, text: str) -> Path:
    path = directory / "private.properties"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_no_secret_on_the_command_line() -> None:
    """``--catalog-uri`` takes the URI only: the help names where the secrets come from instead."""
    from compactor.cli.main import build_parser

    help_text = build_parser().format_help()
    assert "COMPACTOR_REST_CREDENTIAL" in help_text and "http(s)" in help_text


# --- the verbs on a REST catalog ------------------------------------------------------------------------------


def test_the_jvm_free_verbs_through_the_command_line(rest_catalog: RestCatalog, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = rest_catalog.lake_env(rest_catalog.create_warehouse(), auth="token")
    assert cli(monkeypatch, capsys, env, "topic", "create", "shop.orders", "--partitions", "2",
               "--config", "cleanup.policy=compact")[0] == 0
    code, out, err = cli(monkeypatch, capsys, env, "produce", "shop.orders",
                         stdin='{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n')
    assert code == 0, err
    pq.write_table(pa.table({"key": [b"a", b"c"], "value": [b"3", None]}), tmp_path / "in.parquet")
    code, out, err = cli(monkeypatch, capsys, env, "produce", "shop.orders", "--format", "parquet",
                         "--file", str(tmp_path / "in.parquet"))
    assert code == 0, err
    code, out, _ = cli(monkeypatch, capsys, env, "topic", "list")
    assert code == 0 and "shop.orders" in out
    code, out, _ = cli(monkeypatch, capsys, env, "topic", "describe", "shop.orders", "--json")
    assert code == 0 and json.loads(out)["compacted_table"] is None
    assert cli(monkeypatch, capsys, env, "topic", "config", "shop.orders", "--set", "retention.ms=1000")[0] == 0
    code, out, _ = cli(monkeypatch, capsys, env, "read", "shop.orders", "--raw")
    assert code == 0 and len(out.splitlines()) == 4
    code, out, _ = cli(monkeypatch, capsys, env, "status", "shop.orders", "--json")
    assert code == 0 and sum(json.loads(out)["next_offsets"].values()) == 4
    code, out, _ = cli(monkeypatch, capsys, env, "retention", "shop.orders", "--dry-run")
    assert code == 0 and json.loads(out)["dry_run"] is True
    code, _, err = cli(monkeypatch, capsys, env, "read", "shop.nope", "--raw")
    assert code == 1 and "unknown topic 'shop.nope'" in err and rest_catalog.uri in err
    assert cli(monkeypatch, capsys, env, "topic", "delete", "shop.orders")[0] == 0
    code, out, _ = cli(monkeypatch, capsys, env, "topic", "list")
    assert code == 0 and "shop.orders" not in out


def test_a_warehouse_the_catalog_does_not_have_is_named(rest_catalog: RestCatalog, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    lake, env = rest_lake(rest_catalog, "no_such_warehouse")
    with pytest.raises(LakeNotFoundError) as caught:
        lake.list_topics()
    assert "no_such_warehouse" in str(caught.value) and rest_catalog.uri in str(caught.value)
    code, _, err = cli(monkeypatch, capsys, env, "topic", "create", "a.t")  # nothing to create it in
    assert code == 1 and "no_such_warehouse" in err and "COMPACTOR_REST_WAREHOUSE" in err


def test_tokens_client_credentials_and_refusals(rest_catalog: RestCatalog, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = rest_catalog.create_warehouse()
    writer, _ = rest_lake(rest_catalog, warehouse)  # OAuth2 client credentials
    writer.create_topic("a.t")
    produce(writer.topic("a.t"), [ProducerRecord(b"k", b"v")])
    with_token, _ = rest_lake(rest_catalog, warehouse, auth="token")
    assert records(with_token, "a.t") == [(0, 0, b"v")]
    # a token that may only read: reads work, a write is refused (403) and changes nothing
    reader, reader_env = rest_lake(rest_catalog, warehouse, auth="read")
    assert records(reader, "a.t") == [(0, 0, b"v")]
    with pytest.raises(StorageAccessDeniedError, match="403"):
        produce(reader.topic("a.t"), [ProducerRecord(b"k", b"w")])
    code, _, err = cli(monkeypatch, capsys, reader_env, "produce", "a.t", stdin='{"key": "k", "value": "x"}\n')
    assert code == 1 and "access denied" in err and "403" in err
    assert records(writer, "a.t") == [(0, 0, b"v")]
    # a wrong token, wrong client credentials, a missing header: refused at opening, with what to check
    wrong = {**rest_catalog.lake_env(warehouse, auth="token"), "COMPACTOR_REST_TOKEN": "not-the-token"}
    code, _, err = cli(monkeypatch, capsys, wrong, "topic", "list")
    assert code == 1 and "access denied" in err and "401" in err and "COMPACTOR_REST_TOKEN" in err
    assert "not-the-token" not in err
    bad_client = {**rest_catalog.lake_env(warehouse), "COMPACTOR_REST_CREDENTIAL": f"{rest_catalog.client_id}:nope"}
    code, _, err = cli(monkeypatch, capsys, bad_client, "read", "a.t", "--raw")
    assert code == 1 and "access denied" in err and "nope" not in err
    no_header = {**rest_catalog.lake_env(warehouse), "COMPACTOR_REST_PROPERTIES_FILE": ""}
    code, _, err = cli(monkeypatch, capsys, no_header, "topic", "list")
    assert code == 1 and "access denied" in err and "403" in err


# --- outages --------------------------------------------------------------------------------------------------


def test_a_refused_connection_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"http://127.0.0.1:{free_port()}/"  # nothing listens there
    code, _, err = cli(monkeypatch, capsys, {"COMPACTOR_CATALOG_URI": uri, "COMPACTOR_REST_TOKEN": "t"},
                       "topic", "list")
    assert code == 1 and "storage unavailable" in err and "cannot connect" in err and uri in err


def test_server_errors_change_nothing(rest_catalog: RestCatalog) -> None:
    lake, _ = rest_lake(rest_catalog)
    lake.create_topic("e.t")
    produce(lake.topic("e.t"), [ProducerRecord(b"k", b"1")])
    try:
        rest_catalog.inject(r"GET .*/namespaces/e/tables/t status=503")
        with pytest.raises(StorageUnavailableError, match="failed"):
            lake.topic("e.t")
        for code in (500, 502, 503):  # 500 and 502 leave the outcome to the re-read table: it has no commit
            rest_catalog.inject(rf"POST .*/namespaces/e/tables/t status={code}")
            with pytest.raises(StorageUnavailableError, match="failed"):
                produce(lake.topic("e.t"), [ProducerRecord(b"k", b"2")])
    finally:
        rest_catalog.inject()
    assert records(lake, "e.t") == [(0, 0, b"1")]
    produce(lake.topic("e.t"), [ProducerRecord(b"k", b"3")])  # and the topic goes on
    assert records(lake, "e.t") == [(0, 0, b"1"), (0, 1, b"3")]


def test_a_lost_answer_to_a_commit_that_landed_is_a_success(rest_catalog: RestCatalog) -> None:
    """The server applies the commit, then its answer is held past the client's timeout: the product re-reads
    the table, finds its snapshot, and reports the batch's offsets, once."""
    lake, _ = rest_lake(rest_catalog, **SHORT)
    lake.create_topic("l.t")
    produce(lake.topic("l.t"), [ProducerRecord(b"k", b"1")])
    try:
        rest_catalog.inject(r"POST .*/namespaces/l/tables/t delay-after=2500")
        result = produce(lake.topic("l.t"), [ProducerRecord(b"k", b"2")])
    finally:
        rest_catalog.inject()
    assert result.offsets == [(0, 1)]
    assert records(lake, "l.t") == [(0, 0, b"1"), (0, 1, b"2")]


def test_a_commit_still_in_flight_is_outcome_unknown(rest_catalog: RestCatalog, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The client gives up before the server has handled the commit, which then lands: the re-read table cannot
    tell, so the command exits 75 ("outcome unknown"), and re-sending the batch with its id appends nothing."""
    warehouse = rest_catalog.create_warehouse()
    lake, env = rest_lake(rest_catalog, warehouse, **SHORT)
    lake.create_topic("u.t")
    batch = '{"key": "k", "value": "1"}\n'
    try:
        rest_catalog.inject(r"POST .*/namespaces/u/tables/t delay-before=2500")
        code, out, err = cli(monkeypatch, capsys, env, "produce", "u.t", "--batch-id", "b-1", stdin=batch)
        assert code == 75 and "outcome unknown" in err and out == ""
        time.sleep(3)  # the server handles the held request: the commit lands after the client gave up
    finally:
        rest_catalog.inject()
    assert records(lake, "u.t") == [(0, 0, b"1")]
    code, out, err = cli(monkeypatch, capsys, env, "produce", "u.t", "--batch-id", "b-1", stdin=batch)
    assert code == 0 and json.loads(out.splitlines()[0]) == {"partition": 0, "offset": 0}, err
    assert records(lake, "u.t") == [(0, 0, b"1")]


def test_an_unanswered_commit_on_an_unreadable_table_is_outcome_unknown(rest_catalog: RestCatalog) -> None:
    lake, _ = rest_lake(rest_catalog, **SHORT)
    lake.create_topic("v.t")
    topic = lake.topic("v.t")
    try:  # the commit's answer never comes, and the table cannot be re-read (its load after the commit: 503)
        rest_catalog.inject(r"POST .*/namespaces/v/tables/t delay-after=2500",
                            r"GET .*/namespaces/v/tables/t status=503")
        with pytest.raises(OutcomeUnknownError, match="re-send with the same batch id"):
            produce(topic, [ProducerRecord(b"k", b"1")])
    finally:
        rest_catalog.inject()
    time.sleep(2)
    assert records(lake, "v.t") == [(0, 0, b"1")]  # it had landed


def test_a_server_gone_mid_session_changes_nothing(tmp_path: Path) -> None:
    """A server of its own, stopped after the topic was loaded: the append never reaches it (connection refused),
    so it is a clear error, not "outcome unknown", and the table is as it was when the server is back."""
    directory = tmp_path / "rest"
    env = {"COMPACTOR_REST_TOKEN": "t"}
    uri, pid = start_server("rest-catalog-server.sh", directory, key="uri", env={"REST_CATALOG_TOKEN": "t"})
    try:
        lake = Lake(new_lake_config("", uri, **env))
        lake.create_topic("g.t")
        produce(lake.topic("g.t"), [ProducerRecord(b"k", b"1")])
        topic = lake.topic("g.t")
    finally:
        stop_server(pid)
    with pytest.raises(StorageUnavailableError, match="cannot connect") as caught:
        produce(topic, [ProducerRecord(b"k", b"2")])
    assert not isinstance(caught.value, OutcomeUnknownError)
    uri, pid = start_server("rest-catalog-server.sh", directory, key="uri", env={"REST_CATALOG_TOKEN": "t"})
    try:
        assert records(Lake(new_lake_config("", uri, **env)), "g.t") == [(0, 0, b"1")]
    finally:
        stop_server(pid)


def test_the_command_line_in_a_fresh_process(rest_catalog: RestCatalog, tmp_path: Path) -> None:
    """As users run it: ``compactor`` in its own process, configured by its environment only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_"))}
    env.update(rest_catalog.lake_env(rest_catalog.create_warehouse()), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "compactor.cli.main"]
    done = subprocess.run([*command, "topic", "create", "p.t"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "creating a new lake" not in done.stderr  # a REST catalog's warehouse exists: nothing is created
    done = subprocess.run([*command, "produce", "p.t"], input='{"key": "k", "value": "v"}\n', env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and json.loads(done.stdout) == {"partition": 0, "offset": 0}, done.stderr
    secret = rest_catalog.client_secret
    assert secret not in done.stdout + done.stderr and rest_catalog.header[1] not in done.stdout + done.stderr
