"""key_mask(pos, offset=c): true where the last index k <= pos[0] + c (a causal mask's keys
against a runtime position; capture makes it from `arange(K) <= pos + c`, frontend/positions.py).
The comparison reads the index itself, so the bound stays visible to the passes."""
from __future__ import annotations

from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("key_mask")
def decompose_key_mask(op, b: Builder) -> str:
    pos = op.args[0]
    shape = op.type.shape
    bound = b.elementwise("add", pos, int(op.attr("offset", 0)), hint="key_bound")
    return b.elementwise("less_equal", Axis(len(shape) - 1), bound, hint="keep", shape=shape)
