"""softplus(x) = log1p(exp(beta * x)) / beta, and x itself where beta * x > threshold
(torch's cut-off, where the two agree in float32); log_sigmoid(x) = -softplus(-x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


def softplus(b: Builder, x: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    bx = x if beta == 1 else b.elementwise("multiply", x, float(beta), hint="bx")
    soft = log1p(b, b.elementwise("exp", bx))
    if beta != 1:
        soft = b.elementwise("divide", soft, float(beta))
    linear = b.elementwise("greater", bx, float(threshold), hint="linear")
    return b.elementwise("where", linear, x, soft, hint="softplus")


def log1p(b: Builder, u: str) -> str:
    """log(1 + u) to a few ulp for small u too (log(1 + u) is 0 once 1 + u rounds to 1, where
    softplus(-17) is 4e-8): log(w) * u / (w - 1) with w = 1 + u, and u itself where w is 1."""
    w = b.elementwise("add", u, 1.0, hint="w")
    one = b.elementwise("equal", w, 1.0, hint="tiny")
    scaled = b.elementwise("multiply", b.elementwise("log", w), b.elementwise(
        "divide", u, b.elementwise("subtract", w, 1.0, hint="w_less_1"), hint="u_ratio"), hint="log_w")
    return b.elementwise("where", one, u, scaled, hint="log1p")


@rule("softplus")
def decompose_softplus(op, b: Builder) -> str:
    return softplus(b, op.args[0], op.attr("beta", 1.0), op.attr("threshold", 20.0))


@rule("log_sigmoid")
def decompose_log_sigmoid(op, b: Builder) -> str:
    negated = b.elementwise("neg", op.args[0], hint="minus_x")
    return b.elementwise("neg", softplus(b, negated), hint="log_sigmoid")
