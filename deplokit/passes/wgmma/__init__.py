"""Hopper warpgroup MMA (wgmma.mma_async, sm_90a): an advanced feature (README.md)."""
