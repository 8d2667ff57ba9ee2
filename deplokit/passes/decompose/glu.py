"""glu(x, dim) = a * sigmoid(b), a and b the two halves of x along dim."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, var
from .builder import Builder
from .registry import rule


@rule("glu")
def decompose_glu(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    dim = op.attr("dim", -1) % len(shape)
    if shape[dim] % 2:
        raise UnsupportedOpError(f"glu (node {op.name}) halves an odd axis of {shape[dim]}")
    half = shape[dim] // 2
    out = shape[:dim] + (half,) + shape[dim + 1:]
    first = tuple(var(DIM_NAMES[p]) for p in range(len(shape)))
    second = tuple(e + half if p == dim else e for p, e in enumerate(first))
    a = b.index_map(x, first, out, "glu_a")
    gate = b.elementwise("sigmoid", b.index_map(x, second, out, "glu_b"), hint="glu_gate")
    return b.elementwise("multiply", a, gate, hint="glu")
