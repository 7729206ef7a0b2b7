"""Tests on a real Spark standalone cluster and of the deployment files."""
