"""sign and nan_to_num: a value replaced by another where it compares so, as torch does it
(sign of NaN and of -0.0 is +0; nan_to_num's defaults are 0 and the dtype's largest finite)."""
from __future__ import annotations

import torch

from ...ir.types import FLOAT_DTYPES
from .builder import Builder
from .registry import rule


@rule("sign")
def decompose_sign(op, b: Builder) -> str:
    x = op.args[0]
    dtype = b.type(x).dtype
    one, zero = (1.0, 0.0) if dtype in FLOAT_DTYPES else (1, 0)
    below = b.elementwise("where", b.elementwise("less", x, zero), -one, zero, dtype=dtype, hint="sign_neg")
    return b.elementwise("where", b.elementwise("greater", x, zero), one, below, dtype=dtype, hint="sign")


@rule("nan_to_num")
def decompose_nan_to_num(op, b: Builder) -> str:
    x = op.args[0]
    dtype = b.type(x).dtype
    if dtype not in FLOAT_DTYPES:
        return x
    # the largest finite value of the op's own dtype (a half op computes in float32 here)
    big = float(torch.finfo(getattr(torch, op.type.dtype)).max)
    nan, posinf, neginf = (op.attr(k, None) for k in ("nan", "posinf", "neginf"))
    nan = 0.0 if nan is None else float(nan)
    posinf = big if posinf is None else float(posinf)
    neginf = -big if neginf is None else float(neginf)
    # past the largest finite value is +-inf (a half value compares as its float32 self)
    out = b.elementwise("where", b.elementwise("less", x, -big), neginf, x, dtype=dtype, hint="neginf")
    out = b.elementwise("where", b.elementwise("greater", x, big), posinf, out, dtype=dtype, hint="posinf")
    return b.elementwise("where", b.elementwise("not_equal", x, x), nan, out, dtype=dtype, hint="nan_to_num")
