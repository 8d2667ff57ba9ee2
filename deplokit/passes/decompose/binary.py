"""Arithmetic and comparisons of two operands (tensors or scalars), broadcast explicitly."""
from __future__ import annotations

from .builder import Builder
from .registry import rule

_DIRECT = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
           "maximum": "maximum", "minimum": "minimum", "gt": "greater", "lt": "less",
           "ge": "greater_equal", "le": "less_equal", "eq": "equal", "ne": "not_equal",
           "logical_and": "logical_and", "logical_or": "logical_or",
           "floor_divide": "floor_divide", "remainder": "remainder"}   # // and % round to the floor, as torch


@rule(*_DIRECT)
def decompose_binary(op, b: Builder) -> str:
    lhs, rhs = op.args[0], op.args[1]
    alpha = op.attr("alpha", 1)
    if alpha != 1:   # add/sub with alpha scale the second operand
        rhs = b.elementwise("multiply", rhs, float(alpha)) if isinstance(rhs, str) else rhs * alpha
    return b.elementwise(_DIRECT[op.op], lhs, rhs)


@rule("rsub")
def decompose_rsub(op, b: Builder) -> str:
    """rsub(a, b, alpha) = b - alpha * a."""
    a, other = op.args[0], op.args[1]
    alpha = op.attr("alpha", 1)
    if alpha != 1:
        a = b.elementwise("multiply", a, float(alpha))
    return b.elementwise("subtract", other, a)
