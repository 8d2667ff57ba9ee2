"""expand: broadcast size-1 axes (and new leading axes) to a larger shape."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("expand", "expand_as")
def decompose_expand(op, b: Builder) -> str:
    x = op.args[0]
    if op.op == "expand_as":    # to the other operand's shape (torch's result type)
        return b.broadcast_to(x, op.type.shape)
    shape = b.shape(x)
    size = list(op.attr("size"))
    lead = len(size) - len(shape)
    for p, e in enumerate(shape):
        if size[p + lead] == -1:
            size[p + lead] = e
    return b.broadcast_to(x, tuple(size))
