"""where(cond, a, b) and masked_fill(x, mask, value) = where(mask, value, x)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("where")
def decompose_where(op, b: Builder) -> str:
    return b.elementwise("where", *op.args)


@rule("masked_fill")
def decompose_masked_fill(op, b: Builder) -> str:
    x, mask, value = op.args
    # the result has the broadcast shape: a (b, 1, s, t) mask may widen a (s, t) tensor
    return b.elementwise("where", mask, value, x)
