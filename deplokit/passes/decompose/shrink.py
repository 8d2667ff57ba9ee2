"""hardshrink, softshrink and threshold: values near zero (at most the threshold) replaced,
the rest kept (hardshrink, threshold) or moved toward zero by lambda (softshrink)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("hardshrink", "softshrink")
def decompose_shrink(op, b: Builder) -> str:
    x = op.args[0]
    lam = float(op.attr("lambd", 0.5))
    if op.op == "hardshrink":       # torch: 0 where -lambda <= x <= lambda
        inside = b.elementwise("less_equal", b.elementwise("abs", x, hint="magnitude"), lam, hint="inside")
        return b.elementwise("where", inside, 0.0, x, hint="hardshrink")
    above = b.elementwise("where", b.elementwise("greater", x, lam, hint="above"),
                          b.elementwise("subtract", x, lam, hint="down"), 0.0, hint="shrunk_above")
    return b.elementwise("where", b.elementwise("less", x, -lam, hint="below"),
                         b.elementwise("add", x, lam, hint="up"), above, hint="softshrink")


@rule("threshold")
def decompose_threshold(op, b: Builder) -> str:
    x = op.args[0]
    keep = b.elementwise("greater", x, op.attr("threshold"), hint="keep")
    return b.elementwise("where", keep, x, op.attr("value"), hint="threshold")
