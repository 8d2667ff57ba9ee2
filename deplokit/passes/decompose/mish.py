"""mish(x) = x * tanh(softplus(x))."""
from __future__ import annotations

from .builder import Builder
from .registry import rule
from .softplus import softplus


@rule("mish")
def decompose_mish(op, b: Builder) -> str:
    x = op.args[0]
    return b.elementwise("multiply", x, b.elementwise("tanh", softplus(b, x)))
