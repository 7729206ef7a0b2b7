"""Tests of ``consumer``."""
