"""lerp(a, b, w), torch's two-sided form: a + w * (b - a) where |w| < 0.5, else
b - (b - a) * (1 - w) (each end exact at its own weight)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("lerp")
def decompose_lerp(op, b: Builder) -> str:
    start, end = op.args[0], op.args[1]
    weight = op.args[2] if len(op.args) > 2 else float(op.attr("weight"))
    diff = b.elementwise("subtract", end, start, hint="lerp_diff")
    if not isinstance(weight, str):         # a number: the side is known now
        if abs(weight) < 0.5:
            return b.elementwise("add", start, b.elementwise("multiply", diff, weight), hint="lerp")
        return b.elementwise("subtract", end, b.elementwise("multiply", diff, 1.0 - weight), hint="lerp")
    near_start = b.elementwise("less", b.elementwise("abs", weight), 0.5, hint="near_start")
    low = b.elementwise("add", start, b.elementwise("multiply", weight, diff), hint="from_start")
    high = b.elementwise("subtract", end, b.elementwise("multiply", diff, b.elementwise(
        "subtract", 1.0, weight, hint="one_minus_w")), hint="from_end")
    return b.elementwise("where", near_start, low, high, hint="lerp")
