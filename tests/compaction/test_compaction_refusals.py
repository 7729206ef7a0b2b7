"""What the compaction job decides before any Spark work, hence without a JVM: the policy refusal, and the
translation of a lost Iceberg commit inside Spark into a retryable error."""

from __future__ import annotations

import pytest

from compactor.compaction.execution import spark_commit_conflicts
from compactor.compaction.job import compact_topic
from compactor.errors import CommitConflictError, PolicyError
from compactor.lake import Lake


def test_topic_without_compact_policy_is_refused(lake: Lake) -> None:
    lake.create_topic("c.t", config={"cleanup.policy": "delete"})
    with pytest.raises(PolicyError, match=r"cleanup\.policy=delete"):
        compact_topic(lake, "c.t")


def test_a_lost_iceberg_commit_inside_spark_is_a_commit_conflict() -> None:
    """Spark surfaces Iceberg's CommitFailedException as a Py4J error; the job turns it into a retryable
    CommitConflictError (and starts the attempt again) while other Java errors pass through unchanged."""

    class Py4JJavaError(Exception):
        pass

    lost = Py4JJavaError("An error occurred while calling o7.append.\n: org.apache.iceberg.exceptions."
                         "CommitFailedException: Cannot commit s.t__compacted: metadata location has changed")
    with (pytest.raises(CommitConflictError, match="CommitFailedException: Cannot commit") as info,
          spark_commit_conflicts("writing the staging branch")):
        raise lost
    assert info.value.retryable
    other = Py4JJavaError("An error occurred while calling o7.append.\n: java.lang.OutOfMemoryError: heap")
    with pytest.raises(Py4JJavaError), spark_commit_conflicts("writing the staging branch"):
        raise other
