"""Generate the ``spark-submit`` command that runs a ``compactor`` verb on a Spark cluster.

    python -m compactor.deploy --master spark://spark-master:7077 \\
        --warehouse s3://lake/warehouse --catalog-uri postgresql://compactor@postgres:5432/catalog \\
        --conf spark.executor.memory=2g --conf spark.executor.cores=2 -- clean --interval 60

Client deploy mode: the driver (this package, with pyiceberg) runs where the command is started; executors
need only the jars, which ``spark-submit --jars`` ships to them (the job uses no Python UDFs). The session
factory adds the catalog and S3A settings itself under ``spark-submit``; they are also printed as ``--conf``
so the command is complete on its own. ``--warehouse`` and ``--catalog-uri`` default to ``COMPACTOR_WAREHOUSE``
and ``COMPACTOR_CATALOG_URI``.

No credential is ever part of the command, nor of any other command line: the driver reads the S3 keys from
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, the catalog password from ``COMPACTOR_CATALOG_PASSWORD``
(or ``COMPACTOR_CATALOG_PASSWORD_FILE``) and a REST catalog's credential, token and headers from
``COMPACTOR_REST_CREDENTIAL``, ``COMPACTOR_REST_TOKEN`` and ``COMPACTOR_REST_PROPERTIES_FILE`` (or their
files), and sets them on the running session; the catalog URI is printed without its password. On a REST
catalog ``--warehouse`` is optional.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from compactor.config import LakeConfig, is_rest_uri, mask_password
from compactor.errors import InputError, UsageError
from compactor.spark.catalog import catalog_settings, uses_s3
from compactor.spark.jars import required_jars
from compactor.spark.logs import driver_java_options
from compactor.spark.network import is_local_master
from compactor.spark.session import SESSION_EXTENSIONS, local_driver_java_options
from compactor.topics.settings import parse_assignments

SUBMIT_SCRIPT = Path(__file__).resolve().parent / "cli" / "submit.py"


def cluster_jars(config: LakeConfig, directory: Path | None = None) -> list[str]:
    """The jars ``spark-submit --jars`` ships for ``config`` (from ``infra/setup.sh --s3``'s jar directory)."""
    return required_jars(s3=uses_s3(config), rest=config.is_rest, directory=directory, check=False)


def spark_conf(config: LakeConfig) -> dict[str, str]:
    """``--conf`` settings: Iceberg's and the product's extensions, the catalog, S3A (never a credential: see the
    module docstring)."""
    return {"spark.sql.extensions": ",".join(SESSION_EXTENSIONS), **catalog_settings(config)}


def verb_log_level(verb: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The ``--log-level`` the verb's global options give, else ``COMPACTOR_LOG_LEVEL``, else ``None``."""
    for i, arg in enumerate(verb):
        if arg == "--log-level" and i + 1 < len(verb):
            return verb[i + 1]
        if arg.startswith("--log-level="):
            return arg.split("=", 1)[1]
    return env.get("COMPACTOR_LOG_LEVEL") or None


def submit_command(config: LakeConfig, verb: Sequence[str], *, master: str, warehouse: str | None,
                   catalog_uri: str | None, jars: Sequence[str] | None = None,
                   extra_conf: Mapping[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` argument list that runs ``compactor <verb>`` on ``master``."""
    if not verb:
        raise UsageError("give the compactor verb to run, e.g. compact NAME or clean --interval 60")
    command = ["spark-submit", "--master", master, "--deploy-mode", "client", "--name",
               f"compactor {' '.join(verb[:2])}", "--jars", ",".join(jars or cluster_jars(config))]
    # the driver's log4j2 configuration, in force before Spark's first line: Spark's logging on standard error,
    # quiet start-up (see compactor.spark.logs.driver_java_options); with a local master, whose driver runs the
    # tasks, also the collector a local session gets
    level = verb_log_level(verb, os.environ)
    driver_options = (local_driver_java_options(os.environ, level) if is_local_master(master)
                      else driver_java_options(level))
    driver_conf = {"spark.driver.extraJavaOptions": driver_options}
    for key, value in {**spark_conf(config), **driver_conf, **(extra_conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(SUBMIT_SCRIPT)]
    if warehouse:  # optional on a REST catalog, which places its tables itself
        command += ["--warehouse", warehouse]
    if catalog_uri:
        command += ["--catalog-uri", mask_password(catalog_uri, None)]
    return command + list(verb)


def render(command: Sequence[str]) -> str:
    """A shell line; ``${VAR}`` references stay expandable (double quotes), everything else is quoted."""
    quoted = [f'"{arg}"' if "${" in arg else shlex.quote(arg) for arg in command]
    lines: list[str] = []
    for arg in quoted:  # one option (with its value) per line
        if lines and lines[-1].startswith("--") and " " not in lines[-1] and not arg.startswith("--"):
            lines[-1] += " " + arg
        else:
            lines.append(arg)
    return " \\\n  ".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compactor.deploy",
                                     description="print the spark-submit command for a compactor verb")
    parser.add_argument("--master", required=True, help="e.g. spark://spark-master:7077 or yarn")
    parser.add_argument("--warehouse", default=os.environ.get("COMPACTOR_WAREHOUSE"),
                        help="default: COMPACTOR_WAREHOUSE")
    parser.add_argument("--catalog-uri", default=os.environ.get("COMPACTOR_CATALOG_URI"),
                        help="default: COMPACTOR_CATALOG_URI (printed without its password)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra Spark setting, e.g. spark.executor.memory=2g (repeatable)")
    parser.add_argument("--jars-dir", type=Path, help="where the jars are on the submitting machine")
    parser.add_argument("verb", nargs=argparse.REMAINDER, help="-- then the compactor verb and its arguments")
    args = parser.parse_args(argv)
    verb = args.verb[1:] if args.verb[:1] == ["--"] else args.verb
    if not args.warehouse and not (args.catalog_uri and is_rest_uri(args.catalog_uri)):
        parser.error("give --warehouse or set COMPACTOR_WAREHOUSE")
    try:
        extra = parse_assignments(args.conf)
        config = LakeConfig.resolve(warehouse=args.warehouse, catalog_uri=args.catalog_uri)
        command = submit_command(config, verb, master=args.master, warehouse=args.warehouse,
                                 catalog_uri=args.catalog_uri, jars=cluster_jars(config, args.jars_dir),
                                 extra_conf=extra)
    except (UsageError, InputError) as exc:
        parser.error(str(exc))
    print(render(command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
