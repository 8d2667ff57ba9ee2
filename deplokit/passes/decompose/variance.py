"""var and std: sum((x - mean)^2) / (N - correction) over some axes (all when none are
given), std its square root. Two passes (mean first, shifted by the row's first element:
moments.py), as torch, not E[x^2] - E[x]^2."""
from __future__ import annotations

from .builder import Builder, normalize_axes
from .moments import centring_mean
from .registry import rule


@rule("var", "std")
def decompose_variance(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    axes = normalize_axes(op.attr("dim") or None, len(shape))
    n = 1
    for a in axes:
        n *= shape[a]
    mean = centring_mean(b, x, axes, n)
    dev = b.elementwise("subtract", x, mean, hint="dev")
    ss = b.reduce("sum", b.elementwise("multiply", dev, dev, hint="dev2"), axes, hint="ss")
    # N <= correction: torch divides by zero or less and gives inf or nan; so does this
    out = b.elementwise("divide", ss, float(max(n - op.attr("correction", 1), 0)), hint="var")
    if op.op == "std":
        out = b.elementwise("sqrt", out, hint="std")
    if not op.attr("keepdim", False) and axes:
        out = b.squeeze(out, axes)
    return out
