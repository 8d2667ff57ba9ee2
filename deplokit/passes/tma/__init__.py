"""TMA copies and their mbarrier rings, an advanced feature beside the core (README.md here;
off: 011_tma_copy.enable=False)."""
