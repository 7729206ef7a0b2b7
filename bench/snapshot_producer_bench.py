"""Why appends hand-build their snapshot (``compactor.iceberg.snapshots``): the cost of one small commit as a
topic ages, with the append snapshot built by the product or by pyiceberg's public snapshot producers.

    .venv/bin/python -m bench.snapshot_producer_bench --producer ours       # the product as it is
    .venv/bin/python -m bench.snapshot_producer_bench --producer fast       # Transaction ... fast_append()
    .venv/bin/python -m bench.snapshot_producer_bench --producer merge      # ... merge_append(), merging on

Everything but the snapshot (the conditional commit, the raw snapshot window, the batch-id record) is the
product's; each commit is a one-record batch with a batch id, one simulated second apart, 4 partitions.
Prints the median commit time in ms of the 11 commits around commits 1, 100, 500 and 1,000, and the manifests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.update import AddSnapshotUpdate

import compactor.producing.commit as producing_commit
from compactor.iceberg.internals import transaction_parts
from compactor.iceberg.snapshots import BuiltSnapshot
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow

T0 = 1_800_000_000_000


def public_builder(merge: bool) -> Any:
    """``build_append``'s signature, the snapshot built by pyiceberg's snapshot producer in a transaction."""
    def build(table: Table, parent: Any, files: Sequence[DataFile], summary: Mapping[str, str]) -> BuiltSnapshot:
        tx = table.transaction()
        if merge:
            tx.set_properties({"commit.manifest-merge.enabled": "true"})
        producer = tx.update_snapshot(snapshot_properties=dict(summary))
        with producer.merge_append() if merge else producer.fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
        _, _, updates = transaction_parts(tx)
        return BuiltSnapshot(next(u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)), ())
    return build


def main() -> None:
    parser = argparse.ArgumentParser(description="append snapshot: the product's or pyiceberg's")
    parser.add_argument("--producer", choices=["ours", "fast", "merge"], default="ours")
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    if args.producer != "ours":
        vars(producing_commit)["build_append"] = public_builder(args.producer == "merge")  # the one the commit calls
    lake = Lake(warehouse=tempfile.mkdtemp(prefix="snapshot-producer-"))
    lake.open(create=True)  # a new lake
    lake.catalog.create_namespace_if_not_exists("bench")
    topic = lake.create_topic("bench.t", partitions=4)
    times = []
    for i in range(args.commits):
        data = pa.table({"key": [f"k{i}".encode()], "value": [b"v" * 140]})
        started = time.perf_counter()
        produce_arrow(topic, data, batch_id=f"commit-{i}", now_ms=T0 + i * 1000)
        times.append(time.perf_counter() - started)
    out: dict[str, Any] = {"producer": args.producer}
    for at in (1, 100, 500, 1000):
        if at <= args.commits:
            out[str(at)] = round(statistics.median(times[max(0, at - 6): at + 5]) * 1000, 1)
    snapshot = topic.table.current_snapshot()
    out["manifests"] = len(snapshot.manifests(topic.table.io)) if snapshot else 0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
