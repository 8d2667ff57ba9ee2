"""addcmul and addcdiv: x + value * (t1 * t2), x + value * (t1 / t2)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("addcmul", "addcdiv")
def decompose_addcmul(op, b: Builder) -> str:
    x, t1, t2 = op.args
    term = b.elementwise("multiply" if op.op == "addcmul" else "divide", t1, t2, hint=op.op[3:])
    value = op.attr("value", 1)
    if value != 1:
        term = b.elementwise("multiply", term, value, hint="scaled")
    return b.elementwise("add", x, term, hint=op.op)
