"""softplus(x) = log1p(exp(beta * x)) / beta, and x itself where beta * x > threshold
(torch's cut-off, where the two agree in float32); log_sigmoid(x) = -softplus(-x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


def softplus(b: Builder, x: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    bx = x if beta == 1 else b.elementwise("multiply", x, float(beta), hint="bx")
    soft = b.elementwise("log1p", b.elementwise("exp", bx, hint="exp_bx"), hint="log1p")
    if beta != 1:
        soft = b.elementwise("divide", soft, float(beta))
    linear = b.elementwise("greater", bx, float(threshold), hint="linear")
    return b.elementwise("where", linear, x, soft, hint="softplus")


@rule("softplus")
def decompose_softplus(op, b: Builder) -> str:
    return softplus(b, op.args[0], op.attr("beta", 1.0), op.attr("threshold", 20.0))


@rule("log_sigmoid")
def decompose_log_sigmoid(op, b: Builder) -> str:
    negated = b.elementwise("neg", op.args[0], hint="minus_x")
    return b.elementwise("neg", softplus(b, negated), hint="log_sigmoid")
