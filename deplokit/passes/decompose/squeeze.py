"""squeeze: drop size-1 axes (the given ones, or all)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("squeeze")
def decompose_squeeze(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    dims = op.attr("dim")
    if dims is None:
        axes = tuple(d for d, e in enumerate(shape) if e == 1)
    else:
        axes = tuple(sorted({d % len(shape) for d in dims if shape[d % len(shape)] == 1})) if shape else ()
    if not axes:
        return x
    return b.squeeze(x, axes, "squeeze")
