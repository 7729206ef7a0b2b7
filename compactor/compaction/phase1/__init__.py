"""Phase 1 of a compaction run: each key's winner over the new range, into the run's scratch table.

* ``winners``: the step (``find_winners``): reads the range's narrow columns, writes the scratch table.
* ``latest``: pure DataFrame logic: each key's latest offset, and the winners as mask and key rows.
* ``ranking``: pure DataFrame logic of the strategies other than ``offset``: ranks, and the contest of the
  range's winners with the view's rows.
"""
