"""clamp: maximum with the lower bound, then minimum with the upper bound."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("clamp", "clamp_min", "clamp_max")
def decompose_clamp(op, b: Builder) -> str:
    out = op.args[0]
    lo = op.attr("min") if op.op != "clamp_max" else None
    hi = op.attr("max") if op.op != "clamp_min" else None
    if lo is not None:
        out = b.elementwise("maximum", out, lo)
    if hi is not None:
        out = b.elementwise("minimum", out, hi)
    return out
