"""Phase 2 of a compaction run: the new view, written on the run's staging branch.

* ``write``: the step (``write_view``): a retention trim's pass if any, then ``incremental`` (position deletes
  plus appended rows, both written by Spark's tasks as files for the cursor commit: ``files``) or ``rewrite``
  (the whole view afresh); ``outcome`` is what it hands the publish step.
* ``frames``: the DataFrames it reads (the new range, the view at the cursor, phase 1's scratch table).
* ``rows``: pure DataFrame logic: which rows the view keeps and which it removes.
"""
