"""Tests of ``compaction.phase1``: each key's winner over the new range."""
