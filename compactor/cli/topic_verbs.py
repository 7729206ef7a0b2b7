"""``compactor topic create|config|list|describe|delete``: topic administration (no Spark)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from compactor.cli import attach_verbs
from compactor.cli.common import add_json_action, assignments, emit, lake_of
from compactor.topics.describe import TopicDescription, describe_topic
from compactor.topics.settings import SETTINGS


def topic_create(args: argparse.Namespace) -> int:
    topic = lake_of(args).create_topic(args.name, partitions=args.partitions, config=assignments(args.config))
    emit({"topic": str(topic.name), "created": True, "partitions": topic.partitions,
          "settings": topic.settings.as_kafka_dict()})
    return 0


def topic_config(args: argparse.Namespace) -> int:
    topic = lake_of(args).topic(args.name)
    updates = assignments(args.set)
    if updates or args.unset:
        topic.set_config(updates, args.unset)
    emit({"topic": str(topic.name), "settings": topic.settings.as_kafka_dict(),
          "overridden": sorted(s.name for s in SETTINGS if s.stored_as in topic.properties)})
    return 0


def topic_list(args: argparse.Namespace) -> int:
    names = lake_of(args).list_topics(attached=None)
    if args.json:
        emit(names)
    else:
        for name in names:
            print(name)
    return 0


def topic_describe(args: argparse.Namespace) -> int:
    info = describe_topic(lake_of(args).topic(args.name))
    if args.json:
        emit(info)
    else:
        print(render_description(info))
    return 0


def render_description(info: TopicDescription) -> str:
    """A few human lines for ``topic describe`` without ``--json``."""
    lines = [f"topic {info.topic}  ({info.partitions} partition(s), location {info.location})",
             f"  records {info.records}  bytes {info.bytes}  files {info.files}  snapshots {info.snapshots}"]
    for p, entry in info.by_partition.items():
        lines.append(f"  partition {p}: offsets [{info.log_start_offsets[p]}, {info.next_offsets[p]})  "
                     f"records {entry.records}  bytes {entry.bytes}  files {entry.files}")
    lines.append("  settings:")
    lines.extend(f"    {key} = {value}" for key, value in info.settings.items())
    cursor = info.compaction_cursor
    lines.append(f"  compaction cursor: {json.dumps(cursor) if cursor else 'none'}")
    lines.append(f"  compacted table: {info.compacted_table or 'none'}"
                 + (f"  (metadata {info.compacted_metadata_location})" if info.compacted_metadata_location else ""))
    lines.append(f"  erasure bound: {info.erasure_bound.text}")
    lines.append("  schema:")
    lines.extend(f"    {line}" for line in info.schema.splitlines())
    return "\n".join(lines)


def topic_delete(args: argparse.Namespace) -> int:
    emit(lake_of(args).delete_topic(args.name))
    return 0


def register(verbs: Any) -> None:
    topic = verbs.add_parser("topic", help="create, configure, list, describe or delete topics")
    actions = topic.add_subparsers(dest="topic_verb", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic (NAME is namespace.topic)")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, help="partition count, fixed at create (default 1)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic setting")
    create.set_defaults(handler=topic_create)
    config = actions.add_parser("config", help="show or change a topic's settings")
    config.add_argument("name")
    config.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    config.add_argument("--unset", action="append", default=[], metavar="KEY", help="restore the default")
    config.set_defaults(handler=topic_config)
    add_json_action(actions, "list", "list topics", topic_list)
    add_json_action(actions, "describe", "schema, settings, sizes, offsets, erasure bound", topic_describe, "name")
    delete = actions.add_parser("delete", help="drop a topic with all its data")
    delete.add_argument("name")
    delete.set_defaults(handler=topic_delete)
    attach_verbs.register_topic_actions(actions)
