"""Arithmetic and comparisons of two operands (tensors or scalars), broadcast explicitly."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from .builder import Builder
from .registry import rule

_DIRECT = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
           "maximum": "maximum", "minimum": "minimum", "gt": "greater", "lt": "less",
           "ge": "greater_equal", "le": "less_equal", "eq": "equal", "ne": "not_equal",
           "logical_and": "logical_and", "logical_or": "logical_or",
           "floor_divide": "floor_divide", "remainder": "remainder",   # // and % round to the floor, as torch
           "atan2": "atan2", "hypot": "hypot"}


@rule(*_DIRECT)
def decompose_binary(op, b: Builder) -> str:
    lhs, rhs = op.args[0], op.args[1]
    mode = op.attr("rounding_mode", None)
    if op.op == "div" and mode is not None:
        return _rounded_division(op, b, lhs, rhs, mode)
    alpha = op.attr("alpha", 1)
    if alpha != 1:   # add/sub with alpha scale the second operand
        rhs = b.elementwise("multiply", rhs, float(alpha)) if isinstance(rhs, str) else rhs * alpha
    return b.elementwise(_DIRECT[op.op], lhs, rhs)


def _rounded_division(op, b: Builder, lhs, rhs, mode: str) -> str:
    """div(a, b, rounding_mode): floor is floor_divide; trunc of integers is the floor
    quotient moved one up where it is negative and inexact (C's division, computed exactly),
    of floats the quotient truncated."""
    if mode == "floor":
        return b.elementwise("floor_divide", lhs, rhs)
    if mode == "trunc" and op.type.dtype in ("int64", "int32"):
        q = b.elementwise("floor_divide", lhs, rhs, hint="quot")
        r = b.elementwise("remainder", lhs, rhs, hint="rem")
        up = b.elementwise("logical_and", b.elementwise("not_equal", r, 0, hint="inexact"),
                           b.elementwise("less", q, 0, hint="negative"), hint="up")
        return b.elementwise("where", up, b.elementwise("add", q, 1, hint="quot_up"), q)
    if mode == "trunc":         # floats: the quotient rounded toward zero, as torch's trunc(a / b)
        return b.elementwise("truncate", b.elementwise("divide", lhs, rhs, hint="quot"))
    raise UnsupportedOpError(f"div (node {op.name}) with rounding_mode={mode!r}; deplokit supports "
                             f"rounding_mode='floor' and 'trunc'")


@rule("rsub")
def decompose_rsub(op, b: Builder) -> str:
    """rsub(a, b, alpha) = b - alpha * a."""
    a, other = op.args[0], op.args[1]
    alpha = op.attr("alpha", 1)
    if alpha != 1:
        a = b.elementwise("multiply", a, float(alpha))
    return b.elementwise("subtract", other, a)
