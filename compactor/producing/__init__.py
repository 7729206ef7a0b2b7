"""Producing: records into a topic as atomic batches with dense per-partition offsets (SEMANTICS section 1).

One path, one stage after the other (``producer.produce_stream``): the batch's start and batch-id replay
(``replay``), the record rules on each normalised chunk (``validation``, over ``topics.record_rules``), placement
(``plan``, ``placements``), the batch's data files (``files``; ``spark_files`` for a DataFrame), the one
commit (``commit``, with the batch-id record ``batch_ids``), and the result (``results``: ``BatchSummary``,
``ProduceResult``, ``RecordMetadata``). Input formats: ``columns`` (Arrow, pandas, records), ``jsonl``,
``sources``. Front ends: ``producer`` (``produce``, ``produce_arrow``), ``buffered`` (``Producer``),
``dataframe`` (``produce_dataframe``, with ``spark_columns``; ``spark_stage`` drops the staging tables earlier
versions left). What a topic *is* (naming, settings, state, description) stays in ``compactor.topics``;
snapshots and catalog commits are built in ``compactor.iceberg``.
"""
