"""Tests of ``groups``."""
