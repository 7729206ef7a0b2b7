"""The servers the tests and demos use, started by infra/kafka-server.sh and infra/rest-catalog-server.sh: they
answer on 127.0.0.1 only, say where on their first line, write their process id, and refuse a second start."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.servers import ROOT, KafkaBroker, KafkaConnect, RestCatalog

pytestmark = pytest.mark.spark  # JVM servers (conftest adds it from the fixtures as well)


def listening_addresses(pid: int) -> set[str]:
    """The local addresses process ``pid`` listens on (TCP), from ``ss``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if f"pid={pid}," in line}


def test_the_kafka_broker_round_trips_records_on_loopback_only(kafka_broker: KafkaBroker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin re-exports it without declaring so

    assert kafka_broker.bootstrap.startswith("127.0.0.1:")
    topic = f"servers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, key=b"k", value=b"v", headers=[("h", b"1")])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "servers"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    message = consumer.poll(30)
    consumer.close()
    assert message is not None and message.error() is None
    assert (message.offset(), message.key(), message.value(), message.headers()) == (0, b"k", b"v", [("h", b"1")])
    addresses = listening_addresses(kafka_broker.pid)
    assert addresses and all("127.0.0.1" in a for a in addresses), addresses
    assert (kafka_broker.directory / "kafka.pid").read_text().strip() == str(kafka_broker.pid)


def test_the_rest_catalog_serves_iceberg_on_loopback_only_and_checks_credentials(rest_catalog: RestCatalog) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog as Client
    from pyiceberg.exceptions import ForbiddenError, OAuthError, ServiceUnavailableError, UnauthorizedError

    assert rest_catalog.uri.startswith("http://127.0.0.1:")
    namespace = f"servers_{uuid.uuid4().hex[:8]}"
    header = rest_catalog.client_properties
    client = Client("servers", uri=rest_catalog.uri,
                    credential=f"{rest_catalog.client_id}:{rest_catalog.client_secret}", **header)
    client.create_namespace(namespace)
    table = client.create_table(f"{namespace}.t", schema=pa.schema([("a", pa.int64())]))
    table.append(pa.table({"a": [1, 2, 3]}))
    assert client.load_table(f"{namespace}.t").scan().to_arrow().num_rows == 3
    assert Path(table.metadata_location).is_relative_to(rest_catalog.warehouse)
    with pytest.raises(UnauthorizedError):
        Client("servers", uri=rest_catalog.uri, token="not-the-token", **header).list_namespaces()
    with pytest.raises((OAuthError, UnauthorizedError)):
        Client("servers", uri=rest_catalog.uri, credential=f"{rest_catalog.client_id}:wrong", **header)
    with pytest.raises(ForbiddenError):  # the header the server requires
        Client("servers", uri=rest_catalog.uri, token=rest_catalog.token)
    reader = Client("servers", uri=rest_catalog.uri, token=rest_catalog.read_token, **header)
    assert (namespace,) in reader.list_namespaces()
    with pytest.raises(ForbiddenError):
        reader.create_namespace(f"{namespace}_no")
    rest_catalog.inject("GET .*/namespaces status=503")
    try:
        with pytest.raises(ServiceUnavailableError):
            client.list_namespaces()
    finally:
        rest_catalog.inject()
    assert (namespace,) in client.list_namespaces()
    addresses = listening_addresses(rest_catalog.pid)
    assert addresses and all("127.0.0.1" in a for a in addresses), addresses


def test_the_connect_worker_loads_icebergs_sink_and_listens_on_loopback_only(kafka_connect: KafkaConnect) -> None:
    plugins = kafka_connect.request("GET", "/connector-plugins?connectorsOnly=false")
    assert isinstance(plugins, list)
    classes = {plugin["class"] for plugin in plugins}
    assert "org.apache.iceberg.connect.IcebergSinkConnector" in classes
    assert "org.apache.iceberg.connect.transforms.KafkaMetadataTransform" in classes
    assert "org.apache.iceberg.connect.transforms.DebeziumTransform" in classes
    addresses = listening_addresses(kafka_connect.pid)
    assert addresses and all("127.0.0.1" in a for a in addresses), addresses


@pytest.mark.parametrize(("script", "pid_file"), [("kafka-server.sh", "kafka.pid"),
                                                  ("rest-catalog-server.sh", "rest.pid"),
                                                  ("kafka-connect.sh", "connect.pid")])
def test_a_second_server_for_one_directory_is_refused(script: str, pid_file: str, kafka_broker: KafkaBroker,
                                                       rest_catalog: RestCatalog, kafka_connect: KafkaConnect) -> None:
    directory = {"kafka-server.sh": kafka_broker.directory, "rest-catalog-server.sh": rest_catalog.directory,
                 "kafka-connect.sh": kafka_connect.directory}[script]
    args = ["--bootstrap", kafka_broker.bootstrap] if script == "kafka-connect.sh" else []
    done = subprocess.run([str(ROOT / "infra" / script), str(directory), *args], check=False, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert "already runs" in done.stderr
    assert (directory / pid_file).exists()  # the running server's id is kept


@pytest.mark.parametrize("script", ["kafka-server.sh", "rest-catalog-server.sh", "kafka-connect.sh"])
def test_usage_errors_exit_2(script: str, tmp_path: Path) -> None:
    for args in ([], [str(tmp_path), "--no-such-option"]):
        done = subprocess.run([str(ROOT / "infra" / script), *args], check=False, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and done.stdout == "", (args, done.stderr)
