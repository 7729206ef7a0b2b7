"""End-to-end tests: whole routes on every back-end, the README and docs/, other engines, spark-submit."""
