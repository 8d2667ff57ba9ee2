"""argmax / argmin: the first position along an axis that holds the row's max (min),
as min(where(x == max, position, n)). Positions are int64 and every backend computes
integers exactly, so any axis length and integer inputs (compared at their width) work."""
from __future__ import annotations

from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("argmax", "argmin")
def decompose_argmax(op, b: Builder) -> str:
    x = op.args[0]
    dim = op.attr("dim")
    if dim is None:   # over the flattened tensor
        n = 1
        for e in b.shape(x):
            n *= e
        x, dim = b.reshape(x, (n,), "flat"), 0
    shape = b.shape(x)
    dim %= len(shape)
    best = b.reduce("max" if op.op == "argmax" else "min", x, (dim,), hint="best")
    hit = b.elementwise("equal", x, best, hint="hit")
    pos = b.elementwise("where", hit, Axis(dim), shape[dim], hint="pos")
    out = b.reduce("min", pos, (dim,), hint="first")
    if not op.attr("keepdim", False) and op.attr("dim") is not None:
        out = b.squeeze(out, (dim,))
    elif op.attr("dim") is None:
        out = b.reshape(out, op.type.shape, "arg")
    return out
