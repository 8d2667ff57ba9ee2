"""one_hot(x, n): int64 ones where the class axis' position equals x, as a compare with an
iota (an Axis operand). Exact for any class count; eager itself rejects ids outside [0, n)."""
from __future__ import annotations

from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("one_hot")
def decompose_one_hot(op, b: Builder) -> str:
    x = op.args[0]
    shape = op.type.shape
    hit = b.elementwise("equal", b.broadcast_to(b.reshape(x, b.shape(x) + (1,), f"{x}_ids"), shape),
                        Axis(len(shape) - 1), hint="hit", shape=shape)
    return b.elementwise("where", hit, 1, 0, hint="one_hot")
