"""cumsum: out[..., i] = sum over k <= i of x[..., k], in linear time (a blocked scan).

A row of L <= DIRECT elements is one masked sum over a new axis k (position ids from a
padding mask: short rows, where the square costs nothing). A longer row is cut into chunks
of CHUNK elements, and the scan becomes

    local[.., c, i]  = masked sum of chunk c up to i       (L x CHUNK terms)
    total[.., c]     = sum of chunk c                      (L terms)
    before[.., c]    = cumsum of the totals, shifted by one (the same scan, L / CHUNK long)
    out[.., p]       = local[.., p // CHUNK, p % CHUNK] + before[.., p // CHUNK]

so a 65 536-long row costs ~CHUNK x L terms instead of L^2. The order of every sum is fixed
by the IR (no atomics): results are bit-identical run to run; float sums differ from eager's
sequential order only in rounding (the blocked order rounds less). Integer and bool inputs
sum as int64, as in torch: exact in any order.
"""
from __future__ import annotations

from ...ir.index import DIM_NAMES, floordiv, mod, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .copies import cast
from .registry import rule

DIRECT = 64        # rows up to this long: one masked sum (L^2 <= DIRECT x L terms)
CHUNK = 32         # a longer row: chunks of a warp's width


@rule("cumsum")
def decompose_cumsum(op, b: Builder) -> str:
    x = cast(b, op.args[0], op.type.dtype, f"cumsum (node {op.name})")
    return scan(b, x, op.attr("dim") % len(b.shape(x)), "cumsum")


def scan(b: Builder, x: str, dim: int, hint: str) -> str:
    """The inclusive prefix sum of x along dim."""
    length = b.shape(x)[dim]
    if length <= DIRECT:
        return _masked_scan(b, x, dim, hint)
    shape = b.shape(x)
    rank = len(shape)
    n = -(-length // CHUNK)
    zero = _zero(b, x)
    # chunks[.., c, i, ..] = x[.., c * CHUNK + i, ..]; the last chunk's tail reads 0
    blocked = shape[:dim] + (n, CHUNK) + shape[dim + 1:]
    after = {p: var(DIM_NAMES[p + 1]) for p in range(dim + 1, rank)}
    index = tuple(var(DIM_NAMES[dim]) * CHUNK + var(DIM_NAMES[dim + 1]) if p == dim else after.get(p, var(DIM_NAMES[p]))
                  for p in range(rank))
    chunks = b.index_map(x, index, blocked, f"{hint}_chunks", pad=zero)
    local = _masked_scan(b, chunks, dim + 1, f"{hint}_local")
    totals = b.reduce("sum", chunks, (dim + 1,), keepdim=False, hint=f"{hint}_totals")
    upto = scan(b, totals, dim, f"{hint}_upto")
    # out[.., p, ..] = local[.., p // CHUNK, p % CHUNK, ..] + upto[.., p // CHUNK - 1, ..] (0 for chunk 0)
    ranges = {DIM_NAMES[p]: e for p, e in enumerate(shape)}
    p = var(DIM_NAMES[dim])
    chunk, within = floordiv(p, CHUNK, ranges), mod(p, CHUNK, ranges)
    rest = tuple(var(DIM_NAMES[q]) for q in range(dim + 1, rank))
    lead = tuple(var(DIM_NAMES[q]) for q in range(dim))
    mine = b.index_map(local, lead + (chunk, within) + rest, shape, f"{hint}_mine")
    before = b.index_map(upto, lead + (chunk - 1,) + rest, shape, f"{hint}_before", pad=zero)
    return b.elementwise("add", mine, before, hint=hint)


def _masked_scan(b: Builder, x: str, dim: int, hint: str) -> str:
    """out[.., i, ..] = sum over k <= i of x[.., k, ..] as a masked sum over a new last axis k."""
    shape = b.shape(x)
    rank = len(shape)
    # terms[..., i, ..., k] = x[..., k, ...]: the last axis k runs along dim
    wide = shape + (shape[dim],)
    index = tuple(var(DIM_NAMES[rank]) if p == dim else var(DIM_NAMES[p]) for p in range(rank))
    terms = b.index_map(x, index, wide, "terms")
    upto = b.elementwise("less_equal", Axis(rank), Axis(dim), hint="upto", shape=wide)
    kept = b.elementwise("where", upto, terms, _zero(b, x), hint="kept")
    return b.reduce("sum", kept, (rank,), keepdim=False, hint=hint)


def _zero(b: Builder, x: str):
    return 0.0 if b.type(x).dtype == "float32" else 0
