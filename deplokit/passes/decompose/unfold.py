"""unfold (Tensor.unfold(dim, size, step), sliding windows): an index map.

    out[..., w, ..., j] = x[..., w * step + j, ...]   (w < (n - size) // step + 1, j < size)

The windows replace axis `dim`; each window's `size` positions become a new last axis."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, const, var
from .builder import Builder
from .registry import rule


@rule("unfold")
def decompose_unfold(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    if not shape:          # a 0-d tensor unfolds to one window of its one value
        return b.index_map(x, (), (1,), "unfold")
    dim, size, step = op.attr("dim") % len(shape), op.attr("size"), op.attr("step")
    out = op.type.shape
    last = var(DIM_NAMES[len(out) - 1])
    index = tuple((var(DIM_NAMES[p]) * step if out[p] != 1 else const(0)) + (last if size != 1 else const(0))
                  if p == dim else (var(DIM_NAMES[p]) if out[p] != 1 else const(0)) for p in range(len(shape)))
    return b.index_map(x, index, out, "unfold")
