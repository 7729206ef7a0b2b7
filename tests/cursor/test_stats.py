"""The figures a cursor carries (``cursor.stats``): a run's figures add up, the view's bookkeeping follows deletes
and appends, and older or newer cursors' JSON still reads."""

from __future__ import annotations

from compactor.cursor import CompactionStats, ViewStats


def test_run_figures_add_up() -> None:
    """docs/compaction.md, "Statistics": records read + view rows before = records kept + records removed."""
    before = ViewStats(rows=10, tombstones=2)
    survivors = ViewStats(rows=7, tombstones=1)
    appended = ViewStats(rows=5, tombstones=2)
    stats = CompactionStats.of_run(before=before, survivors=survivors, appended=appended, records_read=9,
                                   tombstones_read=3)
    assert stats.records_kept == 12 and stats.rows_deleted_from_view == 3 and stats.rows_appended == 5
    assert stats.records_read + stats.view_rows_before == stats.records_kept + stats.records_removed
    assert stats.tombstones_read + stats.tombstones_before == stats.tombstones_kept + stats.tombstones_dropped
    assert (stats.tombstones_kept, stats.tombstones_dropped) == (3, 2)




def test_view_bookkeeping_follows_deletes_appends_and_trims() -> None:
    view = ViewStats(rows=10, tombstones=2, null_key_rows=1, clean_bytes=100, min_tombstone_delete_horizon=50,
                     min_timestamp_ms=7)
    removed = ViewStats(rows=4, tombstones=2, clean_bytes=40)
    survivors = view.without(removed)
    assert survivors == ViewStats(rows=6, tombstones=0, null_key_rows=1, clean_bytes=60,
                                  min_tombstone_delete_horizon=None, min_timestamp_ms=7)  # no tombstone is left
    added = survivors.plus(ViewStats(rows=2, tombstones=1, clean_bytes=9, min_tombstone_delete_horizon=80,
                                     min_timestamp_ms=3))
    assert (added.rows, added.tombstones, added.min_tombstone_delete_horizon, added.min_timestamp_ms) == (8, 1, 80, 3)
    assert added.at_least(5).min_timestamp_ms == 5 and added.at_least(1).min_timestamp_ms == 3
    assert ViewStats.from_metrics({"doomed_rows": 4, "doomed_tombstones": 1}, "doomed_") == ViewStats(4, 1)


def test_stored_figures_read_whatever_version_wrote_them() -> None:
    view = ViewStats(rows=3, tombstones=1, clean_bytes=30, min_timestamp_ms=9)
    assert ViewStats.from_json(view.to_json()) == view
    assert ViewStats.from_json('{"rows": 3, "a_later_field": 1}') == ViewStats(rows=3)  # newer: extra fields
    stats = CompactionStats(records_read=5, mode="incremental", durations_ms={"phase1_ms": 2})
    assert CompactionStats.from_mapping(stats.as_json()) == stats
    assert CompactionStats.from_mapping({"records_read": 5}) == CompactionStats(records_read=5)  # older: fewer
    assert CompactionStats.unchanged(view, 12) == CompactionStats(records_kept=3, tombstones_kept=1,
                                                                   view_rows_before=3, tombstones_before=1,
                                                                   duration_ms=12)
