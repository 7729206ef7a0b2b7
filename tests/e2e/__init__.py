"""End-to-end tests: whole routes on every back-end, the README, other engines, spark-submit."""
