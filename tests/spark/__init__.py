"""Tests of ``spark``."""
