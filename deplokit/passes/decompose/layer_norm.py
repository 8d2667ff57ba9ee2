"""layer_norm: (x - mean) * rsqrt(var + eps) * weight + bias, two-pass variance, the mean
shifted by the row's first element (moments.py: exact for a constant row)."""
from __future__ import annotations

from .builder import Builder, trailing_axes
from .moments import centring_mean
from .registry import rule


@rule("layer_norm")
def decompose_layer_norm(op, b: Builder) -> str:
    x = op.args[0]
    axes, n = trailing_axes(b.shape(x), op.attr("normalized_shape"))
    mean = centring_mean(b, x, axes, n)
    xc = b.elementwise("subtract", x, mean, hint="xc")
    sq = b.elementwise("multiply", xc, xc, hint="sq")
    ss = b.reduce("sum", sq, axes, hint="ss")
    var_ = b.elementwise("divide", ss, float(n), hint="var")
    var_eps = b.elementwise("add", var_, float(op.attr("eps", 1e-5)), hint="var_eps")
    r = b.elementwise("rsqrt", var_eps, hint="rstd")
    out = b.elementwise("multiply", xc, r, hint="normed")
    rest = list(op.args[1:])
    if op.attr("has_weight", True) and rest:
        out = b.elementwise("multiply", out, rest.pop(0), hint="scaled")
    if op.attr("has_bias", True) and rest:
        out = b.elementwise("add", out, rest.pop(0), hint="shifted")
    return out
