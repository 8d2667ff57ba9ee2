"""outer(a, b)[i, j] = a[i] * b[j]: both broadcast to the (n, m) grid."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, var
from .builder import Builder
from .registry import rule


@rule("outer")
def decompose_outer(op, b: Builder) -> str:
    u, v = op.args
    (n,), (m,) = b.shape(u), b.shape(v)
    rows = b.index_map(u, (var(DIM_NAMES[0]),), (n, m), "outer_a")
    cols = b.index_map(v, (var(DIM_NAMES[1]),), (n, m), "outer_b")
    return b.elementwise("multiply", rows, cols, hint="outer")
