"""Shared Iceberg I/O helpers: the catalog, object storage, row filters, file bounds, task reading, commits."""
