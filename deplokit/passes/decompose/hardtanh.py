"""hardtanh(x, lo, hi) = min(max(x, lo), hi); relu6 is hardtanh(x, 0, 6)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("hardtanh", "relu6")
def decompose_hardtanh(op, b: Builder) -> str:
    lo, hi = (0.0, 6.0) if op.op == "relu6" else (op.attr("min_val", -1.0), op.attr("max_val", 1.0))
    return b.elementwise("minimum", b.elementwise("maximum", op.args[0], float(lo)), float(hi))
