"""Tests of ``readers``."""
