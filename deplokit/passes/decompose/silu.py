"""silu: x * sigmoid(x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("silu")
def decompose_silu(op, b: Builder) -> str:
    x = op.args[0]
    return b.elementwise("multiply", x, b.elementwise("sigmoid", x))
