"""clamp: maximum with the lower bound, then minimum with the upper bound."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("clamp")
def decompose_clamp(op, b: Builder) -> str:
    out = op.args[0]
    lo, hi = op.attr("min"), op.attr("max")
    if lo is not None:
        out = b.elementwise("maximum", out, lo)
    if hi is not None:
        out = b.elementwise("minimum", out, hi)
    return out
