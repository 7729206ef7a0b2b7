"""The generated spark-submit command run for real, with a local master: spark-submit, the jars and the entry
point work (a JVM in a subprocess). (What can be checked without a JVM: test_deploy.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from tests.cluster.test_deploy import ROOT
from tests.conftest import jvm_env

pytestmark = pytest.mark.spark


def test_submit_script_runs_a_verb_through_spark_submit(tmp_path: Path) -> None:
    """The same generated command, with a local master: spark-submit, the jars and the entry point work."""
    warehouse = tmp_path / "wh"
    lake = Lake(warehouse=str(warehouse))
    topic = lake.create_topic("sub.t", config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k", b"1"), ProducerRecord(b"k", b"2")])
    lake.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "AWS_", "SPARK_"))}
    env.update({"SPARK_MASTER": "local[1]", "COMPACTOR_WAREHOUSE": str(warehouse), **jvm_env()})
    result = subprocess.run([str(ROOT / "infra/cluster/submit.sh"), "compact", "sub.t"], capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # `submit.sh compact T 2>/dev/null | jq .`: standard output is the result alone, although spark-submit
    # merges the Python driver's standard error into its standard output (Spark's PythonRunner)
    out = json.loads(result.stdout)
    assert out["committed"] is True and out["horizons"] == {"0": 2}
    # progress goes to standard error, with Spark's own logging at WARN from its first line (no INFO flood)
    assert "compact sub.t: summary:" in result.stderr
    spark_lines = re.findall(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:INFO|WARN) .*$", result.stderr, re.MULTILINE)
    assert spark_lines == [], spark_lines[:10]
