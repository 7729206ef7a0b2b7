"""Tests of ``retention``."""
