"""Contract suites that every implementation of a protocol runs (subclass and provide a factory)."""
