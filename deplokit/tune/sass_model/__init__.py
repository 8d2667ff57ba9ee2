"""The SASS-based main-loop model, an advanced part of the tuner's cost model (README.md here;
compile never reads it)."""
