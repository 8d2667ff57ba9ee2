"""addmm / baddbmm: beta * input + alpha * (mat1 @ mat2), baddbmm batched (attention scores
with a bias)."""
from __future__ import annotations

from .builder import Builder
from .matmul import contract
from .registry import rule


@rule("addmm", "baddbmm")
def decompose_addmm(op, b: Builder) -> str:
    bias, m1, m2 = op.args
    mm = contract(b, m1, m2)
    alpha, beta = op.attr("alpha", 1), op.attr("beta", 1)
    if alpha != 1:
        mm = b.elementwise("multiply", mm, float(alpha))
    if beta == 0:   # torch ignores input then (even its NaNs)
        return b.broadcast_to(mm, op.type.shape)
    if beta != 1:
        bias = b.elementwise("multiply", bias, float(beta))
    return b.elementwise("add", mm, bias)
