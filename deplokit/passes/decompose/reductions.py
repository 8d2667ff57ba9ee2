"""sum, mean, amax, amin over some axes (all when none are given), with or without keepdim."""
from __future__ import annotations

from .builder import Builder, normalize_axes
from .copies import cast
from .registry import rule

_OPS = {"sum": "sum", "amax": "max", "amin": "min", "mean": "sum"}


@rule("sum", "mean", "amax", "amin")
def decompose_reduction(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    axes = normalize_axes(op.attr("dim") or None, len(shape))
    keepdim = op.attr("keepdim", False)
    # torch sums bools as int64, and sum(..., dtype=) casts first: reduce in the result's dtype.
    x = cast(b, x, op.type.dtype, f"{op.op} (node {op.name})")
    red = b.reduce(_OPS[op.op], x, axes, keepdim=True, hint="red" if op.op != "mean" else "sum")
    if op.op == "mean":
        count = 1
        for a in axes:
            count *= shape[a]
        red = b.elementwise("divide", red, float(count), hint="mean")
    if not keepdim and axes:
        red = b.squeeze(red, axes)
    return red
