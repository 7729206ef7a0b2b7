"""Tests of ``compaction``."""
