"""Pointwise ops that are already Tensor-IR primitives: the same op, one operand."""
from __future__ import annotations

from ...ir.ops import OPS
from .builder import Builder
from .registry import rule

# aten op -> the primitive it is (ir/ops.py `aten`)
_DIRECT = {aten: op.name for op in OPS.values() for aten in op.aten}


@rule(*_DIRECT)
def decompose_unary(op, b: Builder) -> str:
    return b.elementwise(_DIRECT[op.op], op.args[0])
