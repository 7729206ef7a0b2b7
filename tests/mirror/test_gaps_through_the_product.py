"""Offsets with gaps through the product, on topics mirrored from the test broker (docs/guarantees.md: the raw log,
retention, readers, consumers): readers and ``read --from-offset`` (an offset in a gap continues at the next), consumers
(positions, caught up at a log end past the last record, lag in offsets), retention's prefix, and compaction in both
Spark layouts against the reference model fed the same records."""

from __future__ import annotations

from typing import Any

import pytest

from compactor import Consumer, Mirror, TopicPartition, TwoPhaseCompactor, run_retention
from compactor.cli.main import main
from compactor.consumer.admin import describe_group
from compactor.consumer.units import take_unit
from compactor.lake import Lake
from compactor.topics.records import Record
from readers import StartPosition, TopicReader
from tests.helpers import view
from tests.kafka_helpers import gapped, in_transaction, transactional
from tests.model import ModelSettings, TopicModel
from tests.servers import KafkaBroker

T0 = 1_800_000_000_000


def offsets_from(lake: Lake, name: str, start: Any) -> list[int]:
    return [r.offset for r in TopicReader(lake, name, start={0: start})]


def test_readers_continue_at_the_next_offset_after_a_gap(lake: Lake, kafka_broker: KafkaBroker,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, name = gapped(lake, kafka_broker)
    assert offsets_from(lake, name, 2) == [5, 6, 8]  # a marker's offset
    assert offsets_from(lake, name, 3) == [5, 6, 8]  # an aborted record's
    assert offsets_from(lake, name, 9) == []  # the trailing marker: nothing left, not an error
    assert offsets_from(lake, name, 10) == []  # N_p itself
    assert offsets_from(lake, name, StartPosition.latest()) == []
    with pytest.raises(IndexError, match=r"offset 11 is out of range .* holds \[0, 10\)"):
        TopicReader(lake, name, start={0: 11})
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    assert main(["--warehouse", lake.config.warehouse, "read", name, "--raw", "--from-offset", "0:7"]) == 0
    assert [line.count('"offset": 8') for line in capsys.readouterr().out.splitlines()] == [1]


def test_consumers_count_offsets_and_catch_up_past_a_trailing_gap(lake: Lake, kafka_broker: KafkaBroker) -> None:
    _, name = gapped(lake, kafka_broker)
    with Consumer(lake, name, group="g", read_compacted=False, auto_offset_reset="earliest") as consumer:
        assert [r.offset for r in consumer.poll(max_records=2)] == [0, 1]
        consumer.commit()
        assert describe_group(lake, "g", now_ms=T0).partitions[0].lag == 8  # N_p 10 - 2: offsets, as Kafka counts
        assert [r.offset for r in consumer.poll(max_records=10)] == [5, 6, 8]
        assert consumer.caught_up()  # at N_p = 10, past the trailing marker at 9
        consumer.commit()
        assert consumer.committed()[next(iter(consumer.assignment()))] == 10
        consumer.seek(0, 3)  # into a gap: the next record is the next offset's
        assert [r.offset for r in consumer.poll(max_records=10)] == [5, 6, 8]
    assert describe_group(lake, "g", now_ms=T0).partitions[0].lag == 0


def test_retention_removes_a_prefix_and_starts_the_log_at_a_record(lake: Lake, kafka_broker: KafkaBroker) -> None:
    from compactor.mirror.runner import Mirror as Run

    topic, name = gapped(lake, kafka_broker)
    in_transaction(transactional(kafka_broker), topic, [(0, b"d", b"5", None)], commit=True)  # 10 (11)
    Run(lake, kafka_broker.bootstrap, [topic], once=True).run()  # a second file: [10, 10], N_p 12
    lake.topic(name).set_config({"retention.ms": "1000"})
    stamps = {r.offset: r.timestamp_ms for r in TopicReader(lake, name)}
    assert max(stamps[o] for o in (0, 1, 5, 6, 8)) < stamps[10]
    everything = run_retention(lake, name, now_ms=stamps[10] + 60_000, dry_run=True)
    assert everything.removed_records == 6 and everything.log_start_offsets == {"0": 12}  # empty: LSO = N_p
    # the first file's records are all older than retention.ms, the second's is not: the log starts at 10
    result = run_retention(lake, name, now_ms=stamps[10] + 1000)
    assert result.removed_records == 5 and result.log_start_offsets == {"0": 10}
    assert offsets_from(lake, name, 10) == [10] and offsets_from(lake, name, 11) == []
    with pytest.raises(IndexError, match="out of range"):
        TopicReader(lake, name, start={0: 9})


def _model_of(lake: Lake, name: str) -> TopicModel:
    model = TopicModel(1)
    model.append(list(TopicReader(lake, name)), gaps=True)
    model.advance(0, lake.topic(name).offsets().next_offsets[0])
    return model


def _as_rows(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(r.partition, r.offset, r.key, r.value) for r in records]


@pytest.mark.spark
@pytest.mark.parametrize("layout", ["partitioned", pytest.param("sliced", marks=pytest.mark.slow)])  # the 2nd layout
def test_compaction_of_a_mirrored_topic_matches_the_model(lake: Lake, kafka_broker: KafkaBroker, spark: Any,
                                                          layout: str) -> None:
    topic, name = gapped(lake, kafka_broker, **{"cleanup.policy": "compact"})
    settings = ModelSettings()
    model = _model_of(lake, name)
    first = TwoPhaseCompactor(lake, name, now_ms=T0, layout=layout).run()
    assert first.committed and first.horizons == {"0": 10} and first.stats.records_read == 5
    model.compact(T0, settings)
    assert _as_rows(view(lake, name)) == _as_rows(model.compacted_view())
    # a compacted consumer and a compacted unit of replay over the view's gaps, up to N_p past the trailing marker
    tp = TopicPartition(name, 0)
    follower = Consumer(lake, name, group="c", read_compacted=True)
    assert follower.beginning_offsets() == {tp: 0} and follower.end_offsets() == {tp: 10}
    assert [r.offset for r in follower.poll(max_records=10)] == [r.offset for r in model.compacted_view()] == [
        5, 6, 8]
    assert follower.position() == {tp: 10} and follower.caught_up()
    follower.seek(0, 3)  # an aborted record's offset, in the compacted range
    assert [r.offset for r in follower.poll(max_records=10)] == [5, 6, 8] and follower.position() == {tp: 10}
    follower.commit({tp: 3})
    described = describe_group(lake, "c", now_ms=T0).partitions[0]
    assert described.in_compacted_range and described.lag == 7
    etl = Consumer(lake, name, group="i", read_compacted=True)
    unit = take_unit(etl, name)  # what read_increment hands Spark, without a Spark job
    assert unit is not None and (unit.start, unit.end) == (0, 10)
    assert [r.offset for r in unit.reader.records()] == [5, 6, 8]
    etl.commit({tp: unit.end})
    # more, with gaps: the next run reads only the new range, and equals the model's incremental run
    producer = transactional(kafka_broker)
    in_transaction(producer, topic, [(0, b"c", b"9", None), (0, b"e", b"10", None)], commit=True)  # 10 11 (12)
    in_transaction(producer, topic, [(0, b"a", b"no", None)], commit=False)  # 13 (14)
    Mirror(lake, kafka_broker.bootstrap, [topic], once=True).run()
    # past the horizon the compacted consumer and the next unit read the raw tail, gaps and all
    assert [(r.offset, r.value) for r in follower.poll(max_records=10)] == [(10, b"9"), (11, b"10")]
    assert follower.position() == {tp: 15} and follower.caught_up()
    follower.close()
    unit = take_unit(etl, name)
    assert unit is not None and (unit.start, unit.end) == (10, 15)
    assert [r.offset for r in unit.reader.records()] == [10, 11]
    etl.close()
    model.append([r for r in TopicReader(lake, name) if r.offset >= 10], gaps=True)
    model.advance(0, 15)
    second = TwoPhaseCompactor(lake, name, now_ms=T0 + 1, layout=layout).run()
    assert second.committed and second.horizons == {"0": 15} and second.stats.records_read == 2
    model.compact(T0 + 1, settings)
    assert _as_rows(view(lake, name)) == _as_rows(model.compacted_view())


@pytest.mark.spark
def test_a_mirrored_topic_that_grew_compacts_reads_and_retains(lake: Lake, spark: Any) -> None:
    """A cursor written before the source gained partitions serves the grown topic: horizon 0 in the new ones."""
    import pyarrow as pa

    from compactor import produce_arrow
    from compactor.status import topic_status
    from tests.kafka_helpers import mirrored_topic

    def rows(pairs: list[tuple[int, int, bytes]]) -> pa.Table:
        return pa.table({"partition": [p for p, _, _ in pairs], "offset": [o for _, o, _ in pairs],
                         "key": [k for _, _, k in pairs], "value": [b"v%d" % o for _, o, _ in pairs],
                         "timestamp_ms": [T0] * len(pairs)})

    topic = mirrored_topic(lake, "k.grown", partitions=1)
    topic.set_config({"cleanup.policy": "compact"})
    produce_arrow(topic, rows([(0, 0, b"a"), (0, 3, b"a"), (0, 5, b"b")]), keep_offsets=True)
    TwoPhaseCompactor(lake, "k.grown", now_ms=T0).run()
    topic.refresh().add_partitions(2)  # the source gained a partition
    produce_arrow(topic.refresh(), rows([(1, 2, b"c"), (1, 4, b"c")]), keep_offsets=True)
    assert [(r.partition, r.offset) for r in view(lake, "k.grown")] == [(0, 3), (0, 5), (1, 2), (1, 4)]
    status = topic_status(lake, "k.grown", now_ms=T0)
    assert status.horizons == {"0": 6, "1": 0} and status.next_offsets == {"0": 6, "1": 5}
    # the old cursor's horizon in the new partition is 0: retention removes nothing there while it is retained
    assert run_retention(lake, "k.grown", now_ms=T0 + 10**12).log_start_offsets == {"0": 6, "1": 0}
    second = TwoPhaseCompactor(lake, "k.grown", now_ms=T0 + 1).run()
    assert second.committed and second.horizons == {"0": 6, "1": 5}
    assert [(r.partition, r.offset) for r in view(lake, "k.grown")] == [(0, 3), (0, 5), (1, 4)]
