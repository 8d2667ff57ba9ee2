"""Flash attention, an advanced feature beside the core (README.md here; off: fuse_attention.enable=False)."""
