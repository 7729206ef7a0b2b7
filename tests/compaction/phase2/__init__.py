"""Tests of ``compaction.phase2``: the new view."""
