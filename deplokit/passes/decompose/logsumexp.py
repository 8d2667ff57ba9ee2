"""logsumexp(x) = m + log(sum(exp(x - m))), m the row's max (0 where m is infinite, so an
all -inf row gives -inf and a row holding +inf gives +inf, as in torch)."""
from __future__ import annotations

import math

from .builder import Builder, normalize_axes
from .registry import rule


@rule("logsumexp")
def decompose_logsumexp(op, b: Builder) -> str:
    x = op.args[0]
    axes = normalize_axes(op.attr("dim") or None, len(b.shape(x)))
    m = b.reduce("max", x, axes, hint="max")
    infinite = b.elementwise("equal", b.elementwise("abs", m), math.inf, hint="inf_max")
    m = b.elementwise("where", infinite, 0.0, m, hint="shift")
    s = b.reduce("sum", b.elementwise("exp", b.elementwise("subtract", x, m)), axes, hint="sum")
    out = b.elementwise("add", b.elementwise("log", s), m, hint="lse")
    if not op.attr("keepdim", False) and axes:
        out = b.squeeze(out, axes)
    return out
