"""clamp: maximum with the lower bound, then minimum with the upper bound (numbers, or
tensors broadcast against x: clamp_tensor)."""
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


@rule("clamp_tensor")
def decompose_clamp_tensor(op, b: Builder) -> str:
    out, bounds = op.args[0], list(op.args[1:])
    if op.attr("has_min", False):
        out = b.elementwise("maximum", out, bounds.pop(0))
    if op.attr("has_max", False):
        out = b.elementwise("minimum", out, bounds.pop(0))
    return out
