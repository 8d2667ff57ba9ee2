"""isnan, isinf, isfinite: NaN is the value unequal to itself, an infinity the one whose
magnitude equals inf, a finite value one whose magnitude is below it (NaN compares false).
An integer or bool tensor holds no NaN and no infinity."""
from __future__ import annotations

from ...ir.types import FLOAT_DTYPES
from .builder import Builder
from .registry import rule


@rule("isnan", "isinf", "isfinite")
def decompose_nonfinite(op, b: Builder) -> str:
    x = op.args[0]
    if b.type(x).dtype not in FLOAT_DTYPES:
        return b.elementwise("equal", b.elementwise("multiply", x, 0, hint="zeros"), 0 if op.op == "isfinite" else 1,
                             hint=op.op)
    if op.op == "isnan":
        return b.elementwise("not_equal", x, x, hint="isnan")
    magnitude = b.elementwise("abs", x, hint="magnitude")
    return b.elementwise("equal" if op.op == "isinf" else "less", magnitude, float("inf"), hint=op.op)
