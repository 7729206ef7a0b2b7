"""Tests of ``iceberg``."""
