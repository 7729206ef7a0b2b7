"""The mirror's pure rules, without a broker: Kafka client settings and secrets, lake names, source gaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.errors import InputError, InvalidTopicNameError, UsageError
from compactor.mirror.gaps import find_gap
from compactor.mirror.names import Selection, parse_renames
from compactor.mirror.settings import REDACTED, is_secret, resolve_settings
from compactor.topics.naming import TopicName


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password", "ssl.keystore.password",
                                 "sasl.oauthbearer.client.secret", "ssl.key.pem", "sasl.oauthbearer.config",
                                 "sasl.jaas.config", "SASL.PASSWORD"])
def test_secrets_are_recognised(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize("key", ["sasl.username", "sasl.mechanism", "ssl.key.location", "ssl.ca.location",
                                 "security.protocol", "client.id", "fetch.max.bytes"])
def test_other_settings_are_not_secrets(key: str) -> None:
    assert not is_secret(key)


def test_secrets_come_from_the_environment_or_a_file_never_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"sasl.password: a secret never goes on the command line.*"
                                         r"COMPACTOR_KAFKA_SASL_PASSWORD") as refused:
        resolve_settings(["sasl.password=hunter2"], env={})
    assert "hunter2" not in str(refused.value)
    config = tmp_path / "client.properties"
    config.write_text("# comment\nsecurity.protocol = SASL_SSL\nsasl.username: mirror\nsasl.password=from-file\n"
                      "client.id=from-file\n")
    config.chmod(0o600)
    settings = resolve_settings(["client.id=from-flag"], env={
        "COMPACTOR_KAFKA_CONFIG_FILE": str(config), "COMPACTOR_KAFKA_SASL_PASSWORD": "from-env",
        "COMPACTOR_KAFKA_FETCH_MAX_BYTES": "1000000"})
    assert settings.values == {"security.protocol": "SASL_SSL", "sasl.username": "mirror",
                               "sasl.password": "from-env", "client.id": "from-flag", "fetch.max.bytes": "1000000"}
    assert settings.redacted()["sasl.password"] == REDACTED and "from-env" not in str(settings.redacted())
    config.chmod(0o640)
    with pytest.raises(InputError, match="holds a secret and is readable by others: chmod 600"):
        resolve_settings([], env={"COMPACTOR_KAFKA_CONFIG_FILE": str(config)})


def test_the_mirror_owns_its_position_settings() -> None:
    for pair in ("enable.auto.commit=true", "enable.partition.eof=false"):
        with pytest.raises(UsageError, match="belong to the mirror"):
            resolve_settings([pair], env={})
    with pytest.raises(UsageError, match="--bootstrap-servers"):
        resolve_settings(["bootstrap.servers=x:1"], env={})
    settings = resolve_settings(["auto.offset.reset=latest"], env={})
    assert settings.start == "latest" and "auto.offset.reset" not in settings.values
    consumer = settings.consumer("g")
    assert consumer["auto.offset.reset"] == "error" and consumer["isolation.level"] == "read_committed"
    assert consumer["enable.auto.commit"] == "false"
    assert resolve_settings(["isolation.level=read_uncommitted"], env={}).consumer("g")["isolation.level"] == (
        "read_uncommitted")
    with pytest.raises(UsageError, match=r"isolation\.level"):
        resolve_settings(["isolation.level=dirty"], env={})


def test_lake_names_and_renames() -> None:
    selection = Selection(("orders", "orders.v1", "-x"), namespace="raw.kafka",
                          renames=parse_renames(["orders.v1=raw.orders_v1"]))
    assert selection.lake_name("orders") == TopicName.parse("raw.kafka.orders")
    assert selection.lake_name("orders.v1") == TopicName.parse("raw.orders_v1")
    with pytest.raises(InvalidTopicNameError, match=r"'-x' cannot be a lake topic.*--rename -x=raw.kafka.NAME"):
        selection.lake_name("-x")
    with pytest.raises(UsageError, match="renamed twice"):
        parse_renames(["a=n.a", "a=n.b"])
    with pytest.raises(UsageError, match="one of them"):
        Selection(("a",), "a.*")
    with pytest.raises(UsageError, match="not a lake namespace"):
        Selection(("a",), namespace="bad name")


def test_a_pattern_matches_whole_names_and_leaves_internal_topics_out() -> None:
    selection = Selection(pattern="orders.*")
    assert selection.chosen(["orders", "orders-eu", "my-orders", "__consumer_offsets", "orders.v1"]) == [
        "orders", "orders-eu", "orders.v1"]
    assert Selection(pattern="__.*").chosen(["__consumer_offsets"]) == []


@pytest.mark.parametrize(("position", "start", "end", "waiting", "id_change", "expected"), [
    (5, 0, 9, False, None, None),                   # inside the source
    (9, 0, 9, False, None, None),                   # at its end
    (0, 7, 9, False, None, None),                   # nothing copied yet: starts where the source does
    (3, 7, 9, False, None, (7, 4, False)),          # retention overtook: skip [3, 7)
    (5, 0, 2, False, None, (5, 5, True)),           # the end fell below: recreated; [0, 5) of the new topic
    (5, 0, 2, True, None, None),                    # already waiting for it to reach 5
    (5, 0, 9, False, ("a", "b"), (5, 5, True)),     # a new topic id past the position
    (5, 8, 9, False, ("a", "b"), (8, 3, True)),     # ... whose log starts past it
])
def test_source_gaps(position: int, start: int, end: int, waiting: bool, id_change: tuple[str, str] | None,
                     expected: tuple[int, int, bool] | None) -> None:
    gap = find_gap("t", 0, position, start, end, waiting=waiting, id_change=id_change)
    assert (None if gap is None else (gap.resume, gap.skipped, gap.recreated)) == expected
    if gap is not None:
        assert f"partition 0: the mirror's position is {position}" in gap.message()
        assert f"[{start}, {end})" in gap.message() and "--on-source-gap skip" in gap.message()


def test_the_mirrors_timeout_is_socket_timeout_ms() -> None:
    assert resolve_settings([], env={}).timeout_s == 30.0
    assert resolve_settings(["socket.timeout.ms=2500"], env={}).timeout_s == 2.5
    for bad in ("socket.timeout.ms=soon", "socket.timeout.ms=0"):
        with pytest.raises(UsageError, match=r"socket\.timeout\.ms must be a positive number"):
            resolve_settings([bad], env={})


def test_librdkafka_lines_said_again_are_left_out_for_a_while() -> None:
    import logging

    from compactor.mirror.source import REPEAT_QUIET_S, RepeatFilter

    now = [0.0]
    quiet = RepeatFilter(clock=lambda: now[0])

    def line(text: str) -> logging.LogRecord:
        return logging.LogRecord("compactor.mirror.kafka", logging.ERROR, "", 0, text, None, None)

    refused = "FAIL [rdkafka#consumer-2]: Connect to ipv4#127.0.0.1:1 failed (after %dms in state CONNECT)"
    assert quiet.filter(line(refused % 0)) and not quiet.filter(line(refused % 1))  # the same but for a number
    assert quiet.filter(line("another line"))
    now[0] = REPEAT_QUIET_S + 1
    assert quiet.filter(line(refused % 3))  # said again after a while
