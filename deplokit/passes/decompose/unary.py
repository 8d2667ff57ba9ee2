"""Pointwise ops that are already Tensor-IR primitives: the same op, one operand."""
from __future__ import annotations

from .builder import Builder
from .registry import rule

_DIRECT = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
           "abs": "abs", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "neg": "neg", "sqrt": "sqrt",
           "sin": "sin", "cos": "cos", "erf": "erf", "logical_not": "logical_not"}


@rule(*_DIRECT)
def decompose_unary(op, b: Builder) -> str:
    return b.elementwise(_DIRECT[op.op], op.args[0])
