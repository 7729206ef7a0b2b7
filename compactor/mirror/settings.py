"""The Kafka client settings of a mirror: any librdkafka setting, with secrets kept off command lines and output.

Layered like the lake's own configuration: ``--kafka-config KEY=VALUE`` (the ``kafka_config`` argument) wins over
the environment, which wins over a file:

* ``COMPACTOR_KAFKA_CONFIG_FILE``: a Kafka client properties file (``KEY=VALUE`` lines, ``#`` comments), as
  Kafka's own tools take with ``--command-config``; when it holds a secret it must be readable by its owner only;
* ``COMPACTOR_KAFKA_<NAME>``: one setting, ``NAME`` upper case with ``_`` for ``.`` (``COMPACTOR_KAFKA_SASL_PASSWORD``
  is ``sasl.password``).

A **secret** (any key naming a password or secret, a private key, or a JAAS / OAuth configuration) is refused on
the command line and in ``kafka_config`` (a process's arguments are visible to every user of the machine), and
never printed: ``redacted`` is what logs and errors show of the settings.

The mirror owns a few settings (the consumer is its own: offsets in the lake, Kafka's committed offsets only
for Kafka's tools) and refuses them; ``auto.offset.reset`` (``earliest`` or ``latest``) says where a partition
the lake has never held starts, and ``isolation.level`` defaults to ``read_committed``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compactor.errors import InputError, UsageError

CONFIG_FILE_ENV = "COMPACTOR_KAFKA_CONFIG_FILE"
ENV_PREFIX = "COMPACTOR_KAFKA_"
_SECRET = re.compile(r"password|secret|jaas|(^|\.)key\.pem$|^ssl_key$|^sasl\.oauthbearer\.config$")
# Set by the mirror itself: the lake holds its positions, so Kafka's own position machinery stays off.
OWNED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
}
START_POLICIES = ("earliest", "latest")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
REDACTED = "[redacted]"


def is_secret(key: str) -> bool:
    """Whether a client setting holds a secret (a password, a secret, a private key, a JAAS or OAuth config)."""
    return bool(_SECRET.search(key.lower()))


@dataclass(frozen=True)
class ClientSettings:
    """A mirror's Kafka client settings (see the module docstring)."""

    values: dict[str, str] = field(default_factory=dict)
    start: str = "earliest"  # where a partition the lake has never held starts (auto.offset.reset)

    @property
    def timeout_s(self) -> float:
        """How long the mirror waits for an answer from Kafka (its admin requests; at the start, the cluster's
        topics): librdkafka's ``socket.timeout.ms`` when given, else 30 s."""
        return int(self.values["socket.timeout.ms"]) / 1000 if "socket.timeout.ms" in self.values else 30.0

    @property
    def isolation_level(self) -> str:
        return self.values.get("isolation.level", "read_committed")

    def redacted(self) -> dict[str, str]:
        """The settings as logs and errors may show them: every secret replaced."""
        return {k: REDACTED if is_secret(k) else v for k, v in sorted(self.values.items())}

    def consumer(self, group_id: str) -> dict[str, str]:
        """The consumer's settings: these, the mirror's own (``OWNED``), and out-of-range reported as an error (a
        source gap is the mirror's to judge, never a silent reset)."""
        return {"group.id": group_id, "isolation.level": self.isolation_level, **self.values, **OWNED,
                "auto.offset.reset": "error"}

    def admin(self) -> dict[str, str]:
        """The settings an admin client takes: these, without the consumer-only ones."""
        consumer_only = ("group.", "isolation.level", "fetch.", "max.partition.fetch.bytes", "queued.",
                         "session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy",
                         "max.poll.interval.ms", "check.crcs", "auto.commit.interval.ms", "group.instance.id")
        return {k: v for k, v in self.values.items() if not k.startswith(consumer_only)}


def _parse_pairs(pairs: list[str], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{where}: expected KEY=VALUE, got {pair.split('=')[0]!r}")
        out[key] = value
    return out


def read_properties_file(path: Path) -> dict[str, str]:
    """A Kafka client properties file: ``KEY=VALUE`` (or ``KEY: VALUE``) lines, ``#`` and ``!`` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {CONFIG_FILE_ENV} {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            raise InputError(f"{CONFIG_FILE_ENV} {path} line {number}: expected KEY=VALUE")
        out[match.group(1)] = match.group(2)
    if any(is_secret(k) for k in out) and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"{CONFIG_FILE_ENV} {path} holds a secret and is readable by others: chmod 600 {path}")
    return out


def from_environment(env: Mapping[str, str]) -> dict[str, str]:
    """Settings from ``COMPACTOR_KAFKA_CONFIG_FILE`` and then ``COMPACTOR_KAFKA_<NAME>`` variables."""
    out: dict[str, str] = {}
    path = env.get(CONFIG_FILE_ENV)
    if path:
        out.update(read_properties_file(Path(path)))
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name != CONFIG_FILE_ENV and len(name) > len(ENV_PREFIX):
            out[name[len(ENV_PREFIX):].lower().replace("_", ".")] = value
    return out


def resolve_settings(kafka_config: Mapping[str, str] | list[str] | None = None,
                     env: Mapping[str, str] | None = None) -> ClientSettings:
    """Combine ``kafka_config`` (pairs from the command line, or a mapping), the environment and the file."""
    given = _parse_pairs(kafka_config, "--kafka-config") if isinstance(kafka_config, list) \
        else dict(kafka_config or {})
    secrets = sorted(k for k in given if is_secret(k))
    if secrets:
        names = ", ".join(secrets)
        example = ENV_PREFIX + secrets[0].upper().replace(".", "_")
        raise UsageError(f"--kafka-config {names}: a secret never goes on the command line (every user of the "
                         f"machine can read a process's arguments); set {example} or put it in the file "
                         f"named by {CONFIG_FILE_ENV}")
    if "bootstrap.servers" in given:
        raise UsageError("give the Kafka servers with --bootstrap-servers, not --kafka-config")
    values = {**from_environment(os.environ if env is None else env), **given}
    owned = sorted(k for k in values if k in OWNED)
    if owned:
        raise UsageError(f"Kafka setting(s) {', '.join(owned)} belong to the mirror: its positions are in the lake, "
                         "and Kafka's committed offsets are written only for Kafka's tools")
    start = values.pop("auto.offset.reset", "earliest")
    if start not in START_POLICIES:
        raise UsageError(f"auto.offset.reset={start!r}: a mirror starts a new partition at 'earliest' or 'latest' "
                         "(a gap in the source is judged by --on-source-gap)")
    timeout = values.get("socket.timeout.ms", "30000")
    if not timeout.isdigit() or int(timeout) < 1:
        raise UsageError(f"socket.timeout.ms must be a positive number of milliseconds, got {timeout!r}")
    if values.get("isolation.level", "read_committed") not in ISOLATION_LEVELS:
        raise UsageError(f"isolation.level must be one of {', '.join(ISOLATION_LEVELS)}")
    return ClientSettings(values, start)


__all__ = ["CONFIG_FILE_ENV", "ENV_PREFIX", "REDACTED", "ClientSettings", "is_secret", "read_properties_file",
           "resolve_settings"]
