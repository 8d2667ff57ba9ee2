"""Torch IR -> Tensor IR: every op through its own rule (registry.RULES); the pass is program.py."""
