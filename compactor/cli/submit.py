"""Entry point for ``spark-submit``: the whole command line, run inside the submitted Spark application.

    spark-submit --master spark://host:7077 --jars <iceberg runtime, jackson, jdbc, s3a jars> \\
        --py-files compactor.zip compactor/cli/submit.py \\
        --warehouse s3://bucket/lake --catalog-uri postgresql://... compact events.orders

The arguments are exactly those of ``compactor`` (global options, then the verb). The session factory sees
that it runs under ``spark-submit`` and uses the submitted configuration (master, memory, jars) unchanged.
Also runnable as ``python -m compactor.cli.submit ...`` (same as the ``compactor`` command).
"""

from __future__ import annotations

import sys

from compactor.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
