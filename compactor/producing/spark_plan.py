"""Whether a DataFrame places its rows the same whichever of its columns a query reads.

The DataFrame producer evaluates its input twice: a counting pass (rows per Spark partition and topic
partition), then the write, which numbers the rows from those counts. The counting pass needs only the keys
(and the partition, timestamp and header columns it checks), but it may read just those only if every row
lands in the same Spark partition, in the same order, as when the write reads every column. That holds for a
plan of scans, projections and filters with deterministic expressions; it does not for a shuffle (adaptive
execution coalesces partitions by their bytes, and a round-robin ``repartition(n)`` first sorts rows on every
column read), a join (its strategy follows the estimated size of what is read), a limit or a sample.

So only plans made of the nodes below take the narrow pass; any other plan reads the values in the counting
pass too, as the write does. The producer checks the written files against the counts either way, and if a
narrow count turns out wrong it counts again reading every column (``producing.dataframe``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactor.spark.internals import java_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# leaves whose partitioning comes from their files, their RDD, their cache or their rows, never the projection
_LEAVES = frozenset({
    "LogicalRelation", "HiveTableRelation", "DataSourceV2Relation", "DataSourceV2ScanRelation", "LogicalRDD",
    "LocalRelation", "Range", "InMemoryRelation", "OneRowRelation",
})
# nodes that keep each row in its child's partition and order
_NARROW = frozenset({"Project", "Filter", "SubqueryAlias", "Union"})


def placement_ignores_projection(df: DataFrame) -> bool:
    """True if ``df``'s optimised plan is only scans, projections, filters and unions of deterministic
    expressions (see the module docstring): a query reading some of its columns sees the same rows in the same
    Spark partitions, in the same order, as one reading all of them."""
    plan: Any = java_frame(df).queryExecution().optimizedPlan()
    pending = [plan]
    while pending:
        node = pending.pop()
        name = str(node.getClass().getSimpleName())
        if not node.deterministic():
            return False
        children = node.children()
        count = int(children.size())
        if count == 0:
            if name not in _LEAVES:
                return False
        elif name not in _NARROW:
            return False
        pending.extend(children.apply(i) for i in range(count))
    return True


__all__ = ["placement_ignores_projection"]
