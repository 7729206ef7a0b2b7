"""Mirrors: Kafka topics copied into lake topics with their own offsets, exactly once (docs/guarantees.md#mirrors).

* ``runner``: ``Mirror``, the loop (consume, commit, follow the source, stop);
* ``follow``: the topics it copies and each partition's position against the source (added partitions and
  topics, source gaps, partitions waiting for a recreated source);
* ``target``: one mirrored topic's lake side (its positions are the lake topic's ``N_p``, committed with the rows);
* ``source``: the Kafka cluster's topics, partitions, ids, settings and offsets (librdkafka's admin client);
* ``gaps``: where a position no longer continues its source (retention overtook it; the topic was recreated);
* ``batches``: records between two commits, as Arrow;
* ``names``: which topics, and the lake name of each; ``settings``: the Kafka client's settings and secrets;
* ``result``: the summary printed on exit.
"""

from compactor.mirror.result import MirrorSummary, PartitionProgress
from compactor.mirror.runner import Mirror, mirror_topics

__all__ = ["Mirror", "MirrorSummary", "PartitionProgress", "mirror_topics"]
