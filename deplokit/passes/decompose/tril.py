"""tril / triu: x where column - row <= diagonal (tril) or >= diagonal (triu), else 0,
on the last two axes."""
from __future__ import annotations

from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("tril", "triu")
def decompose_tril(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    rank = len(shape)
    offset = b.elementwise("subtract", Axis(rank - 1), Axis(rank - 2), hint="offset", shape=shape)
    side = "less_equal" if op.op == "tril" else "greater_equal"
    keep = b.elementwise(side, offset, int(op.attr("diagonal", 0)), hint="keep")
    zero = False if b.type(x).dtype == "bool" else 0
    return b.elementwise("where", keep, x, zero)
