"""logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|)), as torch: a itself where both are the
same infinity (a - b would be NaN there)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("logaddexp")
def decompose_logaddexp(op, b: Builder) -> str:
    x, y = op.args
    top = b.elementwise("maximum", x, y, hint="top")
    gap = b.elementwise("neg", b.elementwise("abs", b.elementwise("subtract", x, y, hint="gap")), hint="minus_gap")
    out = b.elementwise("add", top, b.elementwise("log1p", b.elementwise("exp", gap), hint="soft"), hint="lae")
    same_inf = b.elementwise("logical_and", b.elementwise("equal", x, y, hint="same"),
                             b.elementwise("equal", b.elementwise("abs", x), float("inf"), hint="infinite"),
                             hint="same_inf")
    return b.elementwise("where", same_inf, x, out, hint="logaddexp")
