"""Executors: where evaluations run (one local GPU here; Ray workers in `cluster/`)."""
