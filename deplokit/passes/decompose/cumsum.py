"""cumsum: out[..., i] = sum over k <= i of x[..., k], as a masked sum over a new axis k
(positions ids from a padding mask: short axes, where the square costs nothing).
Integer and bool inputs sum as int64, as in torch."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .copies import cast
from .registry import rule


@rule("cumsum")
def decompose_cumsum(op, b: Builder) -> str:
    x = cast(b, op.args[0], op.type.dtype, f"cumsum (node {op.name})")
    shape = b.shape(x)
    rank = len(shape)
    dim = op.attr("dim") % rank
    # terms[..., i, ..., k] = x[..., k, ...]: the last axis k runs along dim
    wide = shape + (shape[dim],)
    index = tuple(var(DIM_NAMES[rank]) if p == dim else var(DIM_NAMES[p]) for p in range(rank))
    terms = b.index_map(x, index, wide, "terms")
    upto = b.elementwise("less_equal", Axis(rank), Axis(dim), hint="upto", shape=wide)
    zero = 0 if b.type(x).dtype != "float32" else 0.0
    kept = b.elementwise("where", upto, terms, zero, hint="kept")
    return b.reduce("sum", kept, (rank,), keepdim=False, hint="cumsum")
