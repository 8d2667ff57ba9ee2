"""Tile IR → Kernel IR (materialize) and Kernel IR → CUDA text (render)."""
