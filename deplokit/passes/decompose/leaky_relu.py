"""leaky_relu(x, slope) = x where x > 0, else slope * x."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("leaky_relu")
def decompose_leaky_relu(op, b: Builder) -> str:
    x = op.args[0]
    positive = b.elementwise("greater", x, 0.0, hint="positive")
    return b.elementwise("where", positive, x, b.elementwise("multiply", x, float(op.attr("negative_slope", 0.01))))
