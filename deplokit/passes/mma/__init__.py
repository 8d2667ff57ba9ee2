"""Tensor cores (mma.sync), an advanced feature beside the core (README.md here; off:
008_register_tile.mma="off", the default but for precision="tf32")."""
