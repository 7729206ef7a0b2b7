"""Producing: records into a topic as atomic batches with dense per-partition offsets (SEMANTICS section 1).

The core (``plan``, ``placements``, ``files``, ``append``, ``batch_ids``, ``validation``, ``columns``,
``snapshots``), the input formats (``jsonl``, ``sources``) and the front ends (``producer``: ``produce`` and
``produce_arrow``; ``buffered``: ``Producer``; ``dataframe`` with ``spark_files``, ``spark_columns`` and
``spark_stage``: ``produce_dataframe``). What a topic *is* (naming, settings, state, description) stays in
``compactor.topics``.
"""
