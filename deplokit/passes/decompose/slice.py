"""slice and select: a strided window of one axis, or one position of it."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, const, var
from .builder import Builder
from .registry import rule


@rule("slice")
def decompose_slice(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    dim = op.attr("dim", 0) % len(shape)
    start, end, step = op.attr("start", 0), op.attr("end", None), op.attr("step", 1)
    start, end, step = slice(start, end, step).indices(shape[dim])
    n = max(0, (end - start + step - 1) // step)
    if (start, n, step) == (0, shape[dim], 1):
        return x
    out = shape[:dim] + (n,) + shape[dim + 1:]
    index = tuple(var(DIM_NAMES[p]) if p != dim else var(DIM_NAMES[p]) * step + start for p in range(len(shape)))
    index = tuple(const(0) if out[p] == 1 and p != dim else e for p, e in enumerate(index))
    if n == 1:
        index = tuple(const(start) if p == dim else e for p, e in enumerate(index))
    return b.index_map(x, index, out, "slice")


@rule("select")
def decompose_select(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    dim = op.attr("dim") % len(shape)
    pos = op.attr("index") % shape[dim]
    out = shape[:dim] + shape[dim + 1:]
    index = tuple(const(pos) if p == dim else var(DIM_NAMES[p if p < dim else p - 1]) for p in range(len(shape)))
    return b.index_map(x, index, out, "select")
