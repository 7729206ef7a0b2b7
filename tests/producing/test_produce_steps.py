"""A produce, followed call by call, passes through its steps once: its start (the topic read once, the batch id
looked up: ``replay``), its input staged chunk by chunk (each chunk read and normalised, validated, placed and
written: the chunks stream through this step, the next one read while the last one is written), one commit, its
result. The batch-id record (``batch_ids``), the placements the staging step records and the result resolves
(``placements``: data handed from one to the other) and the orchestrator (``producer``) are no step of their
own."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from compactor.lake import Lake
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.producer import produce, produce_arrow
from compactor.topics.records import ProducerRecord
from tests.steps import modules_entered, step_path

STEPS = {
    "compactor.producing.arrow_input": "stage",
    "compactor.producing.replay": "start",
    "compactor.producing.validation": "stage",
    "compactor.producing.partitioning": "stage",
    "compactor.producing.files": "stage",
    "compactor.producing.commit": "commit",
    "compactor.producing.produced": "result",
}


def test_a_produce_passes_through_its_steps_once(lake: Lake) -> None:
    lake.create_topic("p.t", partitions=3)
    records = [ProducerRecord(b"k%d" % (i % 4) if i % 5 else None, b"v%d" % i) for i in range(50)]
    fresh, modules = modules_entered(lambda: produce(lake.topic("p.t"), records, batch_id="b1", now_ms=1000),
                                     "compactor.producing")
    assert not fresh.duplicate and fresh.summary.records == 50
    assert step_path(modules, STEPS) == ["start", "stage", "commit", "result"], modules

    # a re-send is found at its start: staged but never written or committed, its result the original's
    again, modules = modules_entered(lambda: produce(lake.topic("p.t"), records, batch_id="b1", now_ms=2000),
                                     "compactor.producing")
    assert again.duplicate and again.offsets == fresh.offsets
    assert step_path(modules, STEPS) == ["start", "stage", "result"], modules

    table = pa.table({"key": [b"a", b"b", None], "value": [b"1", b"2", b"3"]})
    arrow, modules = modules_entered(lambda: produce_arrow(lake.topic("p.t"), table, now_ms=3000),
                                     "compactor.producing")
    assert arrow.summary.records == 3
    assert step_path(modules, STEPS) == ["start", "stage", "commit", "result"], modules


DATAFRAME_STEPS = {**STEPS, "compactor.producing.spark_plan": "stage", "compactor.producing.spark_files": "stage",
                   "compactor.producing.spark_counts": "stage"}


@pytest.mark.spark
def test_a_dataframe_produce_passes_through_its_steps_once(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("p.d", partitions=2)
    df = spark.createDataFrame([(b"k%d" % i, b"v") for i in range(10)], "key binary, value binary")
    fresh, modules = modules_entered(lambda: produce_dataframe(lake, "p.d", df, batch_id="d1", now_ms=1000),
                                     "compactor.producing")
    assert fresh.records == 10 and not fresh.duplicate
    assert step_path(modules, DATAFRAME_STEPS) == ["start", "stage", "commit", "result"], modules
    again, modules = modules_entered(lambda: produce_dataframe(lake, "p.d", df, batch_id="d1", now_ms=2000),
                                     "compactor.producing")
    assert again.duplicate and again.first_offsets == fresh.first_offsets
    assert step_path(modules, DATAFRAME_STEPS) == ["start", "stage", "result"], modules
