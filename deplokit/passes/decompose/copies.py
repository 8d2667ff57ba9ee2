"""to / contiguous / clone / alias / detach / dropout (eval): the tensor itself.

Only float32 → float32 casts reach here; capture rejects other compute dtypes."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("to", "contiguous", "clone", "alias", "detach", "dropout")
def decompose_copy(op, b: Builder) -> str:
    return op.args[0]
