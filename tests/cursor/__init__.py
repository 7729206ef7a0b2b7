"""Tests of ``cursor``."""
