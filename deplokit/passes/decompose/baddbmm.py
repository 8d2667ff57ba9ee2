"""baddbmm: beta * input + alpha * (batch1 @ batch2), batched (attention scores with a bias)."""
from __future__ import annotations

from .builder import Builder
from .matmul import contract
from .registry import rule


@rule("baddbmm")
def decompose_baddbmm(op, b: Builder) -> str:
    bias, b1, b2 = op.args
    prod = contract(b, b1, b2)
    alpha, beta = op.attr("alpha", 1), op.attr("beta", 1)
    if alpha != 1:
        prod = b.elementwise("multiply", prod, float(alpha), hint="scaled")
    if beta == 0:   # torch ignores input then (even its NaNs)
        return b.broadcast_to(prod, op.type.shape)
    if beta != 1:
        bias = b.elementwise("multiply", bias, float(beta), hint="bias")
    return b.elementwise("add", prod, bias)
