"""hardsigmoid(x) = min(max(x + 3, 0), 6) / 6 and hardswish(x) = x * hardsigmoid(x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("hardswish", "hardsigmoid")
def decompose_hardswish(op, b: Builder) -> str:
    x = op.args[0]
    gate = b.elementwise("minimum", b.elementwise("maximum", b.elementwise("add", x, 3.0), 0.0), 6.0, hint="gate")
    if op.op == "hardsigmoid":
        return b.elementwise("divide", gate, 6.0)
    return b.elementwise("divide", b.elementwise("multiply", x, gate), 6.0)
