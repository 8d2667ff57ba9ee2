"""transpose / t / .T: swap two axes, or reverse all of them for .T (an IndexMap: no data
moves until a kernel reads it)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("transpose", "t")
def decompose_transpose(op, b: Builder) -> str:
    x = op.args[0]
    rank = len(b.shape(x))
    if rank < 2:
        return x
    if op.op == "t":
        return b.permute(x, tuple(reversed(range(rank))), "transpose")
    d0, d1 = op.attr("dim0", 0), op.attr("dim1", 1)
    dims = list(range(rank))
    dims[d0 % rank], dims[d1 % rank] = dims[d1 % rank], dims[d0 % rank]
    return b.permute(x, tuple(dims), "transpose")
