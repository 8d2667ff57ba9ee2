"""argmax / argmin: the first position along an axis that holds the row's max (min),
as min(where(x == max, position, n)), or the first NaN's position (torch's order puts NaN
above every number). The keys are whole numbers below 2**24, so they stay exact
wherever the arithmetic is float32; longer axes, and integer inputs (whose large
values float32 would round), are refused."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule

_EXACT_LIMIT = 2 ** 23      # keys run to 2n


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
    if b.type(x).dtype != "float32":   # integer maxima compare exactly only once int64 is exact everywhere
        raise UnsupportedOpError(f"{op.op} (node {op.name}) of a {b.type(x).dtype} tensor; deplokit takes "
                                 f"{op.op} of float32 tensors")
    if shape[dim] >= _EXACT_LIMIT:
        raise UnsupportedOpError(f"{op.op} (node {op.name}) over {shape[dim]} positions; deplokit computes "
                                 f"positions exactly up to {_EXACT_LIMIT}")
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
