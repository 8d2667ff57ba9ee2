"""index_put (x[idx] = values, without accumulate): a scatter written as a gather.

    last[i]  = max over p of where(idx[p] == i, p, -1)     (the last write to row i: a reduction)
    out[i]   = where(last[i] >= 0, values[last[i]], x[i])  (an index map through `last`)

The last write wins, as torch's sequential CPU loop has it (on a GPU torch leaves duplicate
indices unspecified); deterministic in every backend. MoE routing inverts its sort
permutation this way: inverse[perm[p]] = p. Quadratic in the row count (a count per row)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, const, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .index_select import wrap_negative
from .registry import rule


@rule("index_put")
def decompose_index_put(op, b: Builder) -> str:
    x, values, indices = op.args[0], op.args[1], op.args[2:]
    if op.attr("accumulate"):
        raise UnsupportedOpError(f"index_put (node {op.name}) with accumulate=True sums in an order torch "
                                 "does not fix; deplokit supports accumulate=False")
    if op.attr("dims") != (0,) or len(b.shape(indices[0])) != 1:
        raise UnsupportedOpError(f"index_put (node {op.name}) indexes axes {op.attr('dims')}; deplokit "
                                 "supports one 1-d index tensor on axis 0 (x[idx] = values)")
    shape = b.shape(x)
    rows, n = shape[0], b.shape(indices[0])[0]
    idx = wrap_negative(b, indices[0], rows)
    grid = (rows, n)                                   # (row, write)
    idx_bc = b.index_map(idx, (var(DIM_NAMES[1]),), grid, "put_idx")
    mine = b.elementwise("equal", idx_bc, Axis(0), hint="put_hit")
    which = b.elementwise("where", mine, Axis(1), -1, hint="put_which", dtype="int64")
    last = b.reduce("max", which, (1,), keepdim=False, hint="put_last")
    written = b.elementwise("greater_equal", last, 0, hint="put_written")
    at = b.elementwise("maximum", last, 0, hint="put_at")
    vals = b.broadcast_to(values, (n,) + shape[1:])
    rest = tuple(var(DIM_NAMES[q]) if shape[q] != 1 else const(0) for q in range(1, len(shape)))
    read = b.index_map(vals, (as_affine(Gather(at, (var(DIM_NAMES[0]),))),) + rest, shape, "put_values")
    mask = b.index_map(written, (var(DIM_NAMES[0]),), shape, "put_mask") if len(shape) > 1 else written
    return b.elementwise("where", mask, read, x, hint="index_put")
