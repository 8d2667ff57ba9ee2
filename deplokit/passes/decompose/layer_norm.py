"""layer_norm: (x - mean) * rsqrt(var + eps) * weight + bias, two-pass variance, the mean
shifted by the row's first element (moments.py: exact for a constant row)."""
from __future__ import annotations

from .builder import Builder, trailing_axes
from .moments import centring_mean
from .registry import rule


def standardize(b: Builder, x: str, axes: tuple[int, ...], n: int, eps: float) -> str:
    """(x - mean) * rsqrt(var + eps) over `axes` (n elements), the biased variance: layer_norm's
    and group_norm's core."""
    mean = centring_mean(b, x, axes, n)
    xc = b.elementwise("subtract", x, mean, hint="xc")
    sq = b.elementwise("multiply", xc, xc, hint="sq")
    ss = b.reduce("sum", sq, axes, hint="ss")
    var_ = b.elementwise("divide", ss, float(n), hint="var")
    var_eps = b.elementwise("add", var_, float(eps), hint="var_eps")
    r = b.elementwise("rsqrt", var_eps, hint="rstd")
    return b.elementwise("multiply", xc, r, hint="normed")


@rule("layer_norm")
def decompose_layer_norm(op, b: Builder) -> str:
    x = op.args[0]
    axes, n = trailing_axes(b.shape(x), op.attr("normalized_shape"))
    out = standardize(b, x, axes, n, op.attr("eps", 1e-5))
    rest = list(op.args[1:])
    if op.attr("has_weight", True) and rest:
        out = b.elementwise("multiply", out, rest.pop(0), hint="scaled")
    if op.attr("has_bias", True) and rest:
        out = b.elementwise("add", out, rest.pop(0), hint="shifted")
    return out
