"""rms_norm: x * rsqrt(mean(x * x) + eps) * weight, over the normalized trailing axes."""
from __future__ import annotations

import numpy as np

from .builder import Builder, trailing_axes
from .registry import rule


@rule("rms_norm")
def decompose_rms_norm(op, b: Builder) -> str:
    x = op.args[0]
    axes, n = trailing_axes(b.shape(x), op.attr("normalized_shape"))
    eps = op.attr("eps")
    if eps is None:   # torch's default: the dtype's machine epsilon
        eps = float(np.finfo(np.float32).eps)
    sq = b.elementwise("multiply", x, x, hint="sq")
    ss = b.reduce("sum", sq, axes, hint="ss")
    ms = b.elementwise("divide", ss, float(n), hint="ms")
    ms_eps = b.elementwise("add", ms, float(eps), hint="ms_eps")
    r = b.elementwise("rsqrt", ms_eps, hint="rstd")
    out = b.elementwise("multiply", x, r, hint="normed")
    if len(op.args) > 1:
        out = b.elementwise("multiply", out, op.args[1], hint="scaled")
    return out
