"""Repacking misaligned operands for TMA, an advanced feature beside the core (README.md here;
off: 011_tma_copy.repack=False)."""
