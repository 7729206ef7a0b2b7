"""Tests of ``topics``."""
