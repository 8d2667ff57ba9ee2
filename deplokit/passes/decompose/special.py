"""xlogy(x, y) = x * log(y), 0 where x is 0 (NaN where y is NaN), as torch; sinc(x) =
sin(pi x) / (pi x), 1 at 0; deg2rad and rad2deg: a product with pi / 180 (180 / pi)."""
from __future__ import annotations

import math

from .builder import Builder
from .registry import rule


@rule("xlogy")
def decompose_xlogy(op, b: Builder) -> str:
    x, y = op.args
    product = b.elementwise("multiply", x, b.elementwise("log", y, hint="log_y"), hint="x_log_y")
    zero = b.elementwise("where", b.elementwise("equal", x, 0.0, hint="x_zero"), 0.0, product, hint="xlogy_0")
    return b.elementwise("where", b.elementwise("not_equal", y, y, hint="y_nan"), y, zero, hint="xlogy")


@rule("sinc")
def decompose_sinc(op, b: Builder) -> str:
    x = op.args[0]
    pix = b.elementwise("multiply", x, math.pi, hint="pi_x")
    ratio = b.elementwise("divide", b.elementwise("sin", pix, hint="sin_pi_x"), pix, hint="ratio")
    return b.elementwise("where", b.elementwise("equal", x, 0.0, hint="at_zero"), 1.0, ratio, hint="sinc")


@rule("deg2rad", "rad2deg")
def decompose_angle(op, b: Builder) -> str:
    factor = math.pi / 180 if op.op == "deg2rad" else 180 / math.pi
    return b.elementwise("multiply", op.args[0], factor, hint=op.op)
