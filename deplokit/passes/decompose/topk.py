"""topk and sort: every element's rank along the axis, counted, then read back by rank.

    ahead[.., j, i] = x[j] comes before x[i]: greater (topk, descending sort) or less, NaN
                      counting as the largest value as in torch; ties go to the lower index
    rank[.., i]     = sum over j of ahead[.., j, i]                  (a reduction: a count)
    indices[.., p]  = sum over i of where(rank[i] == p, i, 0)        (the one i of rank p)
    values[.., p]   = x[indices[.., p]]                              (an index map, a gather)

Every step is an elementwise op, a reduction or an index map, exact in every backend (ranks
and positions are integers). Equal values come out lowest index first, as a stable sort
orders them; torch's own topk and unstable sort leave the order of ties unspecified (CPU
topk picks the later index among equal values), so a program whose result depends on which
of two equal values is taken may differ there (docs/moe.md). The count is quadratic in the
axis length: meant for routing (a few dozen experts, tokens x k assignments)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, const, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


def _lead(shape: tuple[int, ...], count: int):
    return tuple(var(DIM_NAMES[q]) if shape[q] != 1 else const(0) for q in range(count))


def ranks(b: Builder, x: str, descending: bool, hint: str) -> str:
    """rank[.., i]: how many elements of x's last axis come before x[.., i] in the order."""
    shape = b.shape(x)
    r = len(shape)
    n = shape[-1]
    pair = shape[:-1] + (n, n)                       # (.., j, i)
    lead = _lead(shape, r - 1)
    xj = b.index_map(x, lead + (var(DIM_NAMES[r - 1]),), pair, f"{hint}_xj")
    xi = b.index_map(x, lead + (var(DIM_NAMES[r]),), pair, f"{hint}_xi")
    ahead = b.elementwise("greater" if descending else "less", xj, xi, hint=f"{hint}_beats")
    same = b.elementwise("equal", xj, xi, hint=f"{hint}_tie")
    if b.type(x).dtype == "float32":     # NaN is the largest value, and NaNs tie with each other
        nan_j = b.elementwise("not_equal", xj, xj, hint=f"{hint}_nan_j")
        nan_i = b.elementwise("not_equal", xi, xi, hint=f"{hint}_nan_i")
        big, small = (nan_j, nan_i) if descending else (nan_i, nan_j)
        nan_ahead = b.elementwise("logical_and", big, b.elementwise("logical_not", small, hint=f"{hint}_num"),
                                  hint=f"{hint}_nan_beats")
        ahead = b.elementwise("logical_or", ahead, nan_ahead, hint=f"{hint}_beats_nan")
        same = b.elementwise("logical_or", same, b.elementwise("logical_and", nan_j, nan_i, hint=f"{hint}_nans"),
                             hint=f"{hint}_tie_nan")
    lower = b.elementwise("less", Axis(r - 1), Axis(r), hint=f"{hint}_lower", shape=pair)
    first = b.elementwise("logical_and", same, lower, hint=f"{hint}_first")
    before = b.elementwise("logical_or", ahead, first, hint=f"{hint}_before")
    count = b.elementwise("where", before, 1, 0, hint=f"{hint}_one")
    return b.reduce("sum", count, (r - 1,), keepdim=False, hint=f"{hint}_rank")


def by_rank(b: Builder, x: str, k: int, descending: bool, hint: str) -> tuple[str, str]:
    """(values, indices) of the first k elements of x's last axis in the order."""
    shape = b.shape(x)
    r = len(shape)
    rank = ranks(b, x, descending, hint)
    grid = shape[:-1] + (k, shape[-1])              # (.., p, i)
    lead = _lead(shape, r - 1)
    rank_bc = b.index_map(rank, lead + (var(DIM_NAMES[r]),), grid, f"{hint}_rank_bc")
    hit = b.elementwise("equal", rank_bc, Axis(r - 1), hint=f"{hint}_at")
    pos = b.elementwise("where", hit, Axis(r), 0, hint=f"{hint}_pos", dtype="int64")
    idx = b.reduce("sum", pos, (r,), keepdim=False, hint=f"{hint}_idx")
    out = shape[:-1] + (k,)
    read = as_affine(Gather(idx, tuple(var(DIM_NAMES[q]) if out[q] != 1 else const(0) for q in range(r))))
    values = b.index_map(x, lead + (read,), out, f"{hint}_values")
    return values, idx


def _along(b: Builder, op, descending: bool, k: int | None) -> str:
    x = op.args[0]
    shape = b.shape(x)
    if not shape:
        raise UnsupportedOpError(f"{op.op} (node {op.name}) of a 0-d tensor is not supported")
    if b.type(x).dtype == "bool":
        raise UnsupportedOpError(f"{op.op} (node {op.name}) of a bool tensor is not supported; cast it to int first")
    dim = op.attr("dim") % len(shape)
    k = shape[dim] if k is None else k
    last = tuple(p for p in range(len(shape)) if p != dim) + (dim,)
    moved = b.permute(x, last, f"{x}_last")
    values, idx = by_rank(b, moved, k, descending, op.op)
    out = values if op.attr("output") == "values" else idx
    back = list(range(len(shape) - 1))
    back.insert(dim, len(shape) - 1)
    return b.permute(out, tuple(back), op.op)


@rule("topk")
def decompose_topk(op, b: Builder) -> str:
    if not op.attr("sorted", True):
        raise UnsupportedOpError(f"topk (node {op.name}) with sorted=False returns its k values in an "
                                 "order torch leaves unspecified; deplokit supports sorted=True")
    return _along(b, op, bool(op.attr("largest", True)), int(op.attr("k")))


@rule("sort")
def decompose_sort(op, b: Builder) -> str:
    return _along(b, op, bool(op.attr("descending", False)), None)
