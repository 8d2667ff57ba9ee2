"""diag: a matrix's diagonal (x[i, i + k], or x[i - k, i] below it), or a vector laid on the
diagonal of a square matrix of zeros (out[i, j] = x[i - max(0, -k)] where j - i = k); trace:
the sum of a matrix's diagonal."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("diag")
def decompose_diag(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    k = int(op.attr("diagonal", 0))
    i = var(DIM_NAMES[0])
    if len(shape) == 2:
        n, m = shape
        length = max(0, min(n, m - k)) if k >= 0 else max(0, min(n + k, m))
        index = (i, i + k) if k >= 0 else (i - k, i)
        if not length:
            raise UnsupportedOpError(f"diag (node {op.name}) of offset {k} of a {n} x {m} matrix has no elements")
        return b.index_map(x, index, (length,), "diag")
    n = shape[0] + abs(k)
    rows = b.index_map(x, (i - max(0, -k),), (n, n), "diag_values", pad=False if b.type(x).dtype == "bool" else 0)
    on = b.elementwise("equal", b.elementwise("subtract", Axis(1), Axis(0), hint="offset", shape=(n, n)), k,
                       hint="on_diagonal")
    zero = False if b.type(x).dtype == "bool" else 0
    return b.elementwise("where", on, rows, zero, hint="diag")


@rule("trace")
def decompose_trace(op, b: Builder) -> str:
    x = op.args[0]
    n, m = b.shape(x)
    i = var(DIM_NAMES[0])
    diagonal = b.index_map(x, (i, i), (min(n, m),), "diagonal")
    return b.reduce("sum", diagonal, (0,), keepdim=False, hint="trace")
