"""linear: x @ weight.T (+ bias), with the weight read transposed instead of copied."""
from __future__ import annotations

from .builder import Builder
from .matmul import contract
from .registry import rule


@rule("linear")
def decompose_linear(op, b: Builder) -> str:
    x, w = op.args[0], op.args[1]
    out = contract(b, x, w, rhs_transposed=True)
    if len(op.args) > 2:
        out = b.elementwise("add", out, op.args[2])
    return out
