"""SQL settings of a session, set for the length of a block and then put back as they were (a key that was unset
is unset again), so that settings one run needs never outlive it on a session that serves other runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[SparkSession]:
    """Set ``settings`` on ``spark`` inside the block; restore each key's previous value (or its absence) on exit,
    also when the block fails."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
