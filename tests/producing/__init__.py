"""Tests of ``producing``."""
