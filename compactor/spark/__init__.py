"""Spark integration: the session factory and the jars it needs."""
