"""floor, ceil, round and trunc: a float to a whole float (round: half to even, as torch);
an integer tensor is already whole, and is its own result. frac is x - trunc(x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule

# Torch-IR op -> the primitive (ir/ops.py; `trunc` there is the cast to an integer)
_PRIMITIVE = {"floor": "floor", "ceil": "ceil", "round": "round", "trunc": "truncate"}


@rule(*_PRIMITIVE)
def decompose_rounding(op, b: Builder) -> str:
    x = op.args[0]
    if b.type(x).dtype in ("int64", "int32"):
        return x
    return b.elementwise(_PRIMITIVE[op.op], x, hint=op.op)


@rule("frac")
def decompose_frac(op, b: Builder) -> str:
    x = op.args[0]
    return b.elementwise("subtract", x, b.elementwise("truncate", x, hint="whole"), hint="frac")
