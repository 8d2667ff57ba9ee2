"""gelu: exact 0.5·x·(1 + erf(x/√2)), or the tanh approximation."""
from __future__ import annotations

import math

from ...errors import UnsupportedOpError
from .builder import Builder
from .registry import rule


@rule("gelu")
def decompose_gelu(op, b: Builder) -> str:
    x = op.args[0]
    approximate = op.attr("approximate", "none")
    if approximate == "none":
        inner = b.elementwise("erf", b.elementwise("multiply", x, 1.0 / math.sqrt(2.0)))
    elif approximate == "tanh":
        cube = b.elementwise("multiply", b.elementwise("multiply", x, x), x)
        poly = b.elementwise("add", x, b.elementwise("multiply", cube, 0.044715))
        inner = b.elementwise("tanh", b.elementwise("multiply", poly, math.sqrt(2.0 / math.pi)))
    else:
        raise UnsupportedOpError(f"gelu approximate={approximate!r} is not supported (none, tanh)")
    half_x = b.elementwise("multiply", x, 0.5)
    return b.elementwise("multiply", half_x, b.elementwise("add", inner, 1.0))
