"""repeat_interleave with a scalar count: each element repeated `repeats` times along an
axis (kv heads repeated for attention). Output position p reads input position p // repeats;
without a dim the input is flattened first, as torch does."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, floordiv, var
from .builder import Builder
from .registry import rule


@rule("repeat_interleave")
def decompose_repeat_interleave(op, b: Builder) -> str:
    x = op.args[0]
    repeats = op.attr("repeats")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 0:
        raise UnsupportedOpError(f"repeat_interleave needs a non-negative integer repeat count, got {repeats!r}")
    dim = op.attr("dim")
    if dim is None:
        n = 1
        for e in b.shape(x):
            n *= e
        x = b.reshape(x, (n,), "flat")
        dim = 0
    shape = b.shape(x)
    dim %= len(shape)
    out = shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1:]
    if repeats == 1:
        return x
    index = tuple(floordiv(var(DIM_NAMES[p]), repeats, {DIM_NAMES[p]: out[p]}) if p == dim else var(DIM_NAMES[p])
                  for p in range(len(shape)))
    return b.index_map(x, index, out, "repeat")
