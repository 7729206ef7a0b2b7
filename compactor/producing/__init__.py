"""Producing: records into a topic as atomic batches with dense per-partition offsets (docs/guarantees.md#the-raw-log).

One path, one step after the other (``producer.produce_stream``): the batch's start, with the topic read once and
its batch id looked up (``replay``); on each normalised chunk, the record rules (``validation``, over
``topics.record_rules``) and each row's partition and rank (``partitioning``, kept in ``placements``); the batch's
data files (``files``; ``spark_files`` for a DataFrame); the one commit (``commit``, with the batch-id record
``batch_ids``); and the result (``produced``: ``BatchSummary``, ``ProduceResult``, ``RecordMetadata``; a replay's
too). Input formats: ``arrow_input`` (Arrow, pandas, records: the normalised layout every format produces),
``jsonl`` (Arrow's JSON reader, falling back to the exact parser ``jsonl_exact``), ``sources`` (the command line's
files). Front ends: ``producer`` (``produce``, ``produce_arrow``), ``buffered`` (``Producer``), ``dataframe``
(``produce_dataframe``, over the compiled functions of ``spark.udf``; ``spark_plan``, ``spark_counts``;
``spark_columns`` is the public path of ``register_functions``). What a topic *is* (naming, settings, state,
description) stays in ``compactor.topics``; snapshots, manifests and catalog commits are built in
``compactor.iceberg``.
"""
