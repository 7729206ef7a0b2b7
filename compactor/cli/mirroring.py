"""``compactor mirror``: copy Kafka topics into the lake (docs/guarantees.md#mirrors), until stopped or, with
``--once``, to the source's end as of the start; progress on standard error, the JSON summary on standard output
at exit."""

from __future__ import annotations

import argparse
from typing import Any

from compactor.cleaner import stop_on_signals
from compactor.cli.common import assignments, emit, lake_of
from compactor.mirror import Mirror
from compactor.mirror.names import DEFAULT_NAMESPACE
from compactor.mirror.runner import DEFAULT_BATCH_RECORDS, DEFAULT_COMMIT_INTERVAL_MS, GAP_POLICIES
from compactor.mirror.settings import CONFIG_FILE_ENV, ENV_PREFIX


def mirror(args: argparse.Namespace) -> int:
    runner = Mirror(lake_of(args), args.bootstrap_servers, args.topic, args.pattern, namespace=args.namespace,
                    renames=args.rename, kafka_config=args.kafka_config, topic_config=assignments(args.config),
                    on_source_gap=args.on_source_gap, commit_interval_ms=args.commit_interval_ms,
                    batch_records=args.batch_records, once=args.once)
    with stop_on_signals(runner):
        summary = runner.run()
    emit(summary)
    return 0


def register(verbs: Any) -> None:
    mirroring = verbs.add_parser(
        "mirror", help="copy Kafka topics into the lake, record for record, with their own offsets",
        description="Copies Kafka topic T into lake topic NS.T, each partition into the same partition, byte for "
                    "byte and exactly once: the mirror's position is stored with the rows it appends. Runs until "
                    "SIGTERM/SIGINT (after a last commit), or with --once to the source's end as of its start; "
                    "then prints a JSON summary. Kafka client secrets come from the environment "
                    f"({ENV_PREFIX}<NAME>) or the file named by {CONFIG_FILE_ENV}, never from the command line.")
    mirroring.add_argument("--bootstrap-servers", required=True, metavar="B", help="Kafka's bootstrap servers")
    which = mirroring.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="T", help="a Kafka topic to mirror "
                       "(repeat for more)")
    which.add_argument("--pattern", metavar="REGEX", help="mirror every Kafka topic whose whole name matches (not "
                       "internal ones), including topics created later")
    mirroring.add_argument("--namespace", default=DEFAULT_NAMESPACE, metavar="NS",
                           help=f"the lake namespace of the mirrored topics (default {DEFAULT_NAMESPACE})")
    mirroring.add_argument("--rename", action="append", default=[], metavar="T=NS.NAME",
                           help="mirror Kafka topic T into lake topic NS.NAME (a name the lake cannot hold must be "
                           "renamed)")
    mirroring.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                           help="a Kafka client setting (librdkafka's names), but no secret; auto.offset.reset "
                           "(earliest, latest) is where a partition the lake never held starts; isolation.level "
                           "defaults to read_committed")
    mirroring.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                           help="a setting of the lake topics the mirror creates (default: the source's "
                           "cleanup.policy, delete.retention.ms, min/max.compaction.lag.ms, "
                           "min.cleanable.dirty.ratio, max.message.bytes)")
    mirroring.add_argument("--on-source-gap", choices=GAP_POLICIES, default="error",
                           help="a source that no longer holds the mirror's position (its retention overtook it, "
                           "or the topic was recreated): stop with an error (default), or skip past it, counted")
    mirroring.add_argument("--commit-interval-ms", type=int, default=DEFAULT_COMMIT_INTERVAL_MS, metavar="MS",
                           help=f"commit at least this often while records arrive (default "
                           f"{DEFAULT_COMMIT_INTERVAL_MS})")
    mirroring.add_argument("--batch-records", type=int, default=DEFAULT_BATCH_RECORDS, metavar="N",
                           help=f"commit once this many records are pending (default {DEFAULT_BATCH_RECORDS})")
    mirroring.add_argument("--once", action="store_true",
                           help="copy up to the source's end as of the start, then commit and exit")
    mirroring.set_defaults(handler=mirror)
