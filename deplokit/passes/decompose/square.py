"""square: x * x (one rounding, as torch)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("square")
def decompose_square(op, b: Builder) -> str:
    x = op.args[0]
    return b.elementwise("multiply", x, x, hint="sq")
