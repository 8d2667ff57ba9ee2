"""Repacking misaligned operands for TMA, an advanced feature beside the core (README.md here;
off: 011_tma_copy.repack=False)."""
from __future__ import annotations

# repack.py reruns passes 001-010 and 011 builds on it: the schedule loads first, so either
# module may be imported on its own
from .. import schedule  # noqa: F401
