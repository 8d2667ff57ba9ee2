"""Row fusion, an advanced feature beside the core (README.md here; off: fuse_rows.enable=False)."""
