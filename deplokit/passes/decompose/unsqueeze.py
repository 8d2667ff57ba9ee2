"""unsqueeze: insert a size-1 axis."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, var
from .builder import Builder
from .registry import rule


@rule("unsqueeze")
def decompose_unsqueeze(op, b: Builder) -> str:
    return unsqueeze(b, op.args[0], op.attr("dim"))


def unsqueeze(b: Builder, x: str, dim: int) -> str:
    shape = b.shape(x)
    dim = dim % (len(shape) + 1)
    out = shape[:dim] + (1,) + shape[dim:]
    index = tuple(var(DIM_NAMES[p if p < dim else p + 1]) for p in range(len(shape)))
    return b.index_map(x, index, out, "unsqueeze")
