"""The external conformance run: an adapter server for the suite's fixtures and the runner that drives it."""
