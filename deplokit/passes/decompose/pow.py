"""pow: tensor ** scalar, scalar ** tensor or tensor ** tensor."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("pow")
def decompose_pow(op, b: Builder) -> str:
    base, exponent = op.args[0], op.args[1]
    if exponent == 1 and isinstance(base, str):
        return base
    return b.elementwise("pow", base, exponent)
