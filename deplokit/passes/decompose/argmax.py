"""argmax / argmin: the first position along an axis that holds the row's max (min),
as min(where(x == max, position, n)), or the first NaN's position (torch's order puts NaN
above every number). Positions are int64 and every backend computes integers exactly, so
any axis length and integer inputs (compared at their width) work."""
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
    # torch counts NaN as the extreme: the first NaN's position if the row has one. Keys:
    # a NaN at p -> p, the extreme at p -> n + p, else 2n; the row's min key says which.
    n = shape[dim]
    best = b.reduce("max" if op.op == "argmax" else "min", x, (dim,), hint="best")
    hit = b.elementwise("equal", x, best, hint="hit")
    nan = b.elementwise("not_equal", x, x, hint="nan")
    later = b.elementwise("add", Axis(dim), n, hint="later", shape=shape)
    key = b.elementwise("where", nan, Axis(dim), b.elementwise("where", hit, later, 2 * n, hint="extreme"), hint="key")
    first = b.reduce("min", key, (dim,), hint="first_key")
    beyond = b.elementwise("greater_equal", first, n, hint="beyond")
    out = b.elementwise("where", beyond, b.elementwise("subtract", first, n, hint="shifted"), first, hint="first")
    if not op.attr("keepdim", False) and op.attr("dim") is not None:
        out = b.squeeze(out, (dim,))
    elif op.attr("dim") is None:
        out = b.reshape(out, op.type.shape, "arg")
    return out
