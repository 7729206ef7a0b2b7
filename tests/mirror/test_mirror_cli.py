"""``compactor mirror`` as users run it, in fresh processes against the test broker: ``--once`` and its JSON
summary, progress on standard error, a clean stop on SIGTERM after a last commit, kill -9 at any moment under a
producer writing transactions (exactly once), and secrets that never reach arguments or output."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from compactor import Mirror
from compactor.lake import Lake
from readers import TopicReader
from tests.kafka_helpers import consume_all, create_topic, in_transaction, offsets, produce, transactional, wait_for
from tests.servers import KafkaBroker, RestCatalog

SECRET = f"s3cret-{uuid.uuid4().hex}"


def env_of(lake: Lake, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    env.update(COMPACTOR_CATALOG_NAME=lake.config.catalog_name, COMPACTOR_WAREHOUSE=lake.config.warehouse, **extra)
    if "COMPACTOR_JARS_DIR" in os.environ:
        env["COMPACTOR_JARS_DIR"] = os.environ["COMPACTOR_JARS_DIR"]
    return env


def command(broker: KafkaBroker, *args: str, servers: str | None = None) -> list[str]:
    return [sys.executable, "-m", "compactor.cli.main", "mirror", "--bootstrap-servers", servers or broker.bootstrap,
            *args]


def lake_records(lake: Lake, name: str) -> list[tuple[Any, ...]]:
    return [(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp_ms) for r in TopicReader(lake, name)]


def test_once_over_sasl_prints_its_summary_and_progress_and_keeps_secrets_out(
        lake: Lake, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    assert kafka_broker.sasl_bootstrap is not None
    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, [(0, b"a", b"1", None), (1, b"b", b"2", [("h", None)])])
    config = tmp_path / "client.properties"
    config.write_text(f"# Kafka client settings\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      f"sasl.username={kafka_broker.sasl_user}\nsasl.password={kafka_broker.sasl_password}\n")
    config.chmod(0o600)  # readable by its owner only (tests/mirror/test_mirror_rules.py: refused otherwise)
    env = env_of(lake, COMPACTOR_KAFKA_CONFIG_FILE=str(config))
    sasl = {"servers": kafka_broker.sasl_bootstrap}
    # a wrong password from the environment (it wins over the file): refused, and said so without the password
    wrong = subprocess.run(command(kafka_broker, "--topic", topic, "--once", **sasl), check=False,
                           capture_output=True, text=True, env={**env, "COMPACTOR_KAFKA_SASL_PASSWORD": SECRET},
                           timeout=120)
    assert wrong.returncode == 1 and "refused the credentials" in wrong.stderr, wrong.stderr
    assert SECRET not in wrong.stdout + wrong.stderr and not lake.catalog.table_exists(f"kafka.{topic}")
    done = subprocess.run(command(kafka_broker, "--topic", topic, "--once", "--kafka-config", "client.id=mirror-1",
                                  **sasl), check=False, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # standard output holds the summary and nothing else
    assert summary["stopped"] == "once" and summary["records_copied"] == 2
    assert [(p["topic"], p["partition"], p["position"], p["copied"], p["skipped"]) for p in summary["partitions"]] == [
        (f"kafka.{topic}", 0, 1, 1, 0), (f"kafka.{topic}", 1, 1, 1, 0)]
    assert "mirror" in done.stderr and "event=mirroring" in done.stderr  # progress goes to standard error
    assert kafka_broker.sasl_password not in done.stdout + done.stderr
    assert lake_records(lake, f"kafka.{topic}") == consume_all(kafka_broker, topic, partitions=2)



def test_failures_change_nothing_and_the_first_topic_makes_the_lake(kafka_broker: KafkaBroker,
                                                                    tmp_path: Path) -> None:
    """An unreachable broker and a missing topic are one-line errors that create nothing; the first topic a
    mirror makes, like ``topic create``, makes the lake and says so."""
    from compactor.config import LakeConfig
    from tests.s3_server import free_port

    warehouse = tmp_path / "new-lake"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    env.update(COMPACTOR_WAREHOUSE=str(warehouse), COMPACTOR_JARS_DIR=os.environ.get("COMPACTOR_JARS_DIR", ""))

    def run(*args: str, servers: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command(kafka_broker, *args, "--once", servers=servers), check=False,
                              capture_output=True, text=True, env=env, timeout=120)

    topic = create_topic(kafka_broker)
    nobody = f"127.0.0.1:{free_port()}"
    down = run("--topic", topic, "--kafka-config", "socket.timeout.ms=1500", servers=nobody)
    assert down.returncode == 1 and down.stdout == "", down.stderr
    last = down.stderr.strip().splitlines()[-1]
    assert last.startswith("compactor: error: no answer from Kafka within 1.5 s") and f"Kafka at {nobody}" in last
    assert len(down.stderr.splitlines()) < 10  # librdkafka's line per connection attempt is said once
    missing = run("--topic", f"{topic}-missing")
    assert missing.returncode == 1 and f"has no topic '{topic}-missing'" in missing.stderr, missing.stderr
    assert not warehouse.exists()  # neither made a lake
    produce(kafka_broker, topic, [(0, b"k", b"v", None)])
    done = run("--topic", topic)
    assert done.returncode == 0, done.stderr
    assert f"creating a new lake: catalog 'lake' in sqlite:///{warehouse}/catalog.db" in done.stderr
    assert json.loads(done.stdout)["records_copied"] == 1
    lake = Lake(LakeConfig.resolve(warehouse=str(warehouse), env={}))  # the default catalog name, as the CLI's
    assert lake_records(lake, f"kafka.{topic}") == consume_all(kafka_broker, topic)
    lake.close()


def test_a_mirror_on_a_rest_catalog(kafka_broker: KafkaBroker, rest_catalog: RestCatalog) -> None:
    """In a fresh process configured by its environment only, as ``topic create`` is on a REST catalog: the
    mirror creates its topic where the catalog places it, and records, positions and the source's state land."""
    from tests.conftest import new_lake_config

    topic = create_topic(kafka_broker, partitions=2)
    producer = transactional(kafka_broker)
    in_transaction(producer, topic, [(0, b"a", b"1", None), (1, b"b", None, [("h", b"")])], commit=True)
    lake_env = rest_catalog.lake_env(rest_catalog.create_warehouse())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "AWS_"))}
    env.update(lake_env, COMPACTOR_JARS_DIR=os.environ.get("COMPACTOR_JARS_DIR", ""))
    done = subprocess.run(command(kafka_broker, "--topic", topic, "--once"), check=False, capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["records_copied"] == 2
    assert rest_catalog.client_secret not in done.stdout + done.stderr
    lake = Lake(new_lake_config("", rest_catalog.uri, **lake_env))
    name = f"kafka.{topic}"
    assert lake_records(lake, name) == consume_all(kafka_broker, topic, partitions=2)
    assert lake.topic(name).offsets().next_offsets == (2, 2)  # past each partition's commit marker
    state = lake.topic(name).mirror
    assert state is not None and state.source == topic and state.source_log_end == (2, 2)
    lake.close()


def test_a_secret_on_the_command_line_is_refused(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.cli.main import main

    code = main(["--warehouse", lake.config.warehouse, "mirror", "--bootstrap-servers", "127.0.0.1:1", "--topic",
                 "t", "--kafka-config", f"sasl.password={SECRET}"])
    err = capsys.readouterr().err
    assert code == 2 and "a secret never goes on the command line" in err
    assert "COMPACTOR_KAFKA_SASL_PASSWORD" in err and SECRET not in err


def test_sigterm_stops_after_a_last_commit(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [(0, f"k{i}".encode(), b"v", None) for i in range(50)])
    # no commit comes on its own: every record the lake gets, it gets from the last commit on SIGTERM
    process = subprocess.Popen(command(kafka_broker, "--topic", topic, "--commit-interval-ms", "600000"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env_of(lake, COMPACTOR_KAFKA_SASL_PASSWORD=SECRET))
    try:
        assert process.stderr is not None and process.stdout is not None
        seen: list[str] = []
        while not any("event=reached-end" in line for line in seen):  # every record was read; none committed
            line = process.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        assert SECRET not in Path(f"/proc/{process.pid}/cmdline").read_text()
        assert not lake.catalog.table_exists(f"kafka.{topic}") or lake.topic(f"kafka.{topic}").offsets(
        ).next_offsets == (0,)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    summary = json.loads(out)
    assert summary["stopped"] == "signal" and summary["records_copied"] == 50 and summary["commits"] == 1
    assert [r.offset for r in TopicReader(lake, f"kafka.{topic}")] == list(range(50))
    assert SECRET not in out + err + "".join(seen)


class TransactionalWriter:
    """Writes transactions to a topic until stopped: each commits or aborts at random, records in 2 partitions."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        self.producer = transactional(broker)
        self.topic = topic
        self.stopped = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(7)
        try:
            while not self.stopped.is_set():
                n = self.transactions
                records = [(i % 2, f"k{rng.randrange(20)}".encode(), f"t{n}-{i}".encode(), [("n", str(n).encode())])
                           for i in range(rng.randrange(1, 30))]
                in_transaction(self.producer, self.topic, records, commit=rng.random() < 0.7)
                self.transactions += 1
                time.sleep(0.01)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)
        assert self.error is None, self.error


def test_kill_9_at_any_moment_under_transactions_copies_each_record_once(lake: Lake, kafka_broker: KafkaBroker,
                                                                         tmp_path: Path) -> None:
    topic = create_topic(kafka_broker, partitions=2)
    writer = TransactionalWriter(kafka_broker, topic)
    name = f"kafka.{topic}"
    base = command(kafka_broker, "--topic", topic, "--commit-interval-ms", "30", "--batch-records", "40")
    rng = random.Random(11)
    # crashes at the two edges of a commit (failure points end the process as kill -9 would), then at random moments
    rounds: list[dict[str, str]] = [{"COMPACTOR_FAILPOINTS": "produce-before-commit=exit"},
                                    {"COMPACTOR_FAILPOINTS": "produce-after-commit=exit"}, {}, {}]
    try:
        wait_for(lambda: writer.transactions >= 3, "the first transactions")
        for extra in rounds:
            process = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                       env=env_of(lake, **extra))
            try:
                if extra:
                    assert process.wait(timeout=120) == 137, process.stderr.read() if process.stderr else ""
                else:
                    wait_for(lambda: lake.catalog.table_exists(name), "the lake topic")
                    time.sleep(rng.uniform(0.3, 2.0))  # a random moment: before, during or between commits
                    process.send_signal(signal.SIGKILL)
                    process.wait(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
    finally:
        writer.stop()
    summary = Mirror(lake, kafka_broker.bootstrap, [topic], once=True).run()
    assert lake_records(lake, name) == consume_all(kafka_broker, topic, partitions=2)  # no record twice, none lost
    assert lake.topic(name).offsets().next_offsets == tuple(offsets(kafka_broker, topic, p)[1] for p in range(2))
    assert summary.offsets_skipped == 0


@pytest.mark.parametrize("args, message", [
    (["--topic", "t", "--pattern", "x"], "not allowed with argument"),
    (["--topic", "t", "--on-source-gap", "maybe"], "invalid choice"),
    (["--topic", "t", "--commit-interval-ms", "0"], "--commit-interval-ms must be a positive integer"),
    (["--topic", "t", "--kafka-config", "enable.auto.commit=true"], "belong to the mirror"),
    (["--topic", "t", "--kafka-config", "auto.offset.reset=error"], "starts a new partition at 'earliest' or"),
    (["--pattern", "("], "is not a regular expression"),
    (["--topic", "t", "--rename", "t"], "--rename expects KAFKA_TOPIC=NAMESPACE.NAME"),
])
def test_usage_errors_exit_2(lake: Lake, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.cli.main import main

    try:
        code = main(["--warehouse", lake.config.warehouse, "mirror", "--bootstrap-servers", "127.0.0.1:1", *args])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    assert code == 2 and message in capsys.readouterr().err
