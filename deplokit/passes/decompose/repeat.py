"""repeat and tile: out[..., p, ...] = x[..., p % n, ...] on every axis, new leading axes first."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, const, mod, var
from .builder import Builder
from .registry import rule


@rule("repeat")
def decompose_repeat(op, b: Builder) -> str:
    x = op.args[0]
    repeats = tuple(op.attr("repeats"))
    shape = b.shape(x)
    repeats = (1,) * (len(shape) - len(repeats)) + repeats     # tile: fewer repeats than axes
    lead = len(repeats) - len(shape)
    out = tuple(repeats[:lead]) + tuple(e * r for e, r in zip(shape, repeats[lead:]))
    ranges = {DIM_NAMES[q]: e for q, e in enumerate(out)}
    index = tuple(const(0) if e == 1 else mod(var(DIM_NAMES[p + lead]), e, ranges) for p, e in enumerate(shape))
    if out == shape:
        return x
    return b.index_map(x, index, out, "repeat")
