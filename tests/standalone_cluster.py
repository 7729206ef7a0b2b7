"""A Spark standalone cluster for a test: one master and workers started from PySpark's own distribution with
``spark-class``, bound to 127.0.0.1 only (``--host`` and ``SPARK_LOCAL_IP``, which the web UIs and the
executors the workers launch also bind to), and stopped by their process ids (each in its own process group,
so the executors they launched go too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.conftest import TEST_JVM_OPTIONS
from tests.s3_server import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    """A running standalone cluster: its master URL, its master web UI, and the worker UIs' ports."""

    master_url: str
    master_ui: str
    worker_ui_ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def status(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as response:
            status: dict[str, object] = json.loads(response.read())
            return status


def _spark_class(main: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


@contextmanager
def standalone_cluster(workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[Cluster]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK"))}
    env.update({"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
                "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS})  # the master's and the workers' JVMs
    port, ui = free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}")
    try:
        cluster.processes.append(_spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", str(port), "--webui-port", str(ui), env=env,
                                              log=workdir / "master.log"))
        for number in range(workers):
            worker_ui = free_port()
            cluster.worker_ui_ports.append(worker_ui)
            work = workdir / f"worker-{number}"
            work.mkdir()
            cluster.processes.append(_spark_class(
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores), "--memory",
                memory, "--webui-port", str(worker_ui), "--work-dir", str(work), cluster.master_url, env=env,
                log=workdir / f"worker-{number}.log"))
        deadline = time.monotonic() + 120
        while True:
            try:
                if cluster.status().get("aliveworkers") == workers:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.processes):
                logs = "\n".join(path.read_text(errors="replace")[-2000:] for path in sorted(workdir.glob("*.log")))
                raise RuntimeError(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for process in cluster.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
