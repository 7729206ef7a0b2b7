"""The local session's JVM options: the product picks the JVM's garbage collector unless one is already chosen
(``session.collector_option``), and a user's own driver options win over all of the product's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.spark.session import LOCAL_COLLECTOR, collector_option, local_defaults, user_spark_keys
from tests import jvm_archive

ROOT = Path(__file__).resolve().parents[2]


def test_a_local_session_runs_the_throughput_collector_unless_the_environment_chooses_one() -> None:
    assert LOCAL_COLLECTOR in local_defaults({})["spark.driver.extraJavaOptions"].split()
    for variable in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        for chosen in ("-XX:+UseSerialGC", "-Xmx1g -XX:+UseG1GC -Dx=y", "-XX:+UseZGC"):
            env = {variable: chosen}
            assert collector_option(env) == "", env
            assert "GC" not in local_defaults(env)["spark.driver.extraJavaOptions"], env
    # options that are not a choice of collector leave the product's
    for other in ("-XX:+UseGCOverheadLimit", "-XX:+UseCompressedOops -Xss4m", "-XX:-UseG1GCX"):
        assert collector_option({"SPARK_SUBMIT_OPTS": other}) == LOCAL_COLLECTOR, other


def test_driver_java_options_given_to_pyspark_keep_the_products_out() -> None:
    """``--driver-java-options`` sets the driver's options as ``--conf spark.driver.extraJavaOptions`` does:
    either way the local default (with its collector) is left out."""
    args = "--driver-java-options '-XX:+UseG1GC' pyspark-shell"
    assert "spark.driver.extraJavaOptions" in user_spark_keys({"PYSPARK_SUBMIT_ARGS": args})
    conf = "--conf spark.driver.extraJavaOptions=-Dx=1 pyspark-shell"
    assert "spark.driver.extraJavaOptions" in user_spark_keys({"PYSPARK_SUBMIT_ARGS": conf})


SESSION = """
import sys
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session
lake = Lake(warehouse=sys.argv[1])
spark = get_or_create_session(lake.config)
jvm = spark.sparkContext._jvm
beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print(",".join(sorted(beans.get(i).getName() for i in range(beans.size()))))
print(spark.range(1000).selectExpr("sum(id)").first()[0])
"""


@pytest.mark.slow  # a JVM of its own
@pytest.mark.spark
def test_a_fresh_local_session_starts_with_the_collector_and_runs_a_job(tmp_path: Path) -> None:
    """In a fresh process with no collector in the environment, the session's JVM starts (the product's options
    and Spark's own make one valid command line) and collects with the parallel collector's two halves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "SPARK_"))}
    # the tests' compiler setting and class archive, not their collector
    env.update(PYTHONPATH=str(ROOT), COMPACTOR_DRIVER_MEMORY="512m", COMPACTOR_SPARK_CORES="1",
               SPARK_SUBMIT_OPTS=f"-XX:TieredStopAtLevel=1 {jvm_archive.options()}".strip())
    done = subprocess.run([sys.executable, "-c", SESSION, str(tmp_path / "wh")], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    collectors, total = done.stdout.splitlines()[-2:]
    assert collectors == "PS MarkSweep,PS Scavenge" and total == str(sum(range(1000)))
