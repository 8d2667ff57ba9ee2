"""argmax / argmin: the first position along an axis that holds the row's max (min),
as min(where(x == max, position, n)). Positions are whole numbers below 2**24, so they
stay exact wherever the arithmetic is float32; longer axes, and integer inputs (whose large
values float32 would round), are refused."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule

_EXACT_LIMIT = 2 ** 24


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
    best = b.reduce("max" if op.op == "argmax" else "min", x, (dim,), hint="best")
    hit = b.elementwise("equal", x, best, hint="hit")
    pos = b.elementwise("where", hit, Axis(dim), shape[dim], hint="pos")
    out = b.reduce("min", pos, (dim,), hint="first")
    if not op.attr("keepdim", False) and op.attr("dim") is not None:
        out = b.squeeze(out, (dim,))
    elif op.attr("dim") is None:
        out = b.reshape(out, op.type.shape, "arg")
    return out
