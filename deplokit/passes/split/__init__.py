"""Split-reduce, an advanced feature beside the core (README.md here; off: split_reduce.splits=1)."""
