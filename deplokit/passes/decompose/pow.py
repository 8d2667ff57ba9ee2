"""pow: tensor ** scalar, scalar ** tensor or tensor ** tensor. An integer tensor to a whole
power is a chain of multiplies (exact at its width, as torch computes it, never through powf)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from .builder import Builder
from .registry import rule

_MAX_INT_EXPONENT = 64      # beyond it any base but -1, 0, 1 overflows int64


@rule("pow")
def decompose_pow(op, b: Builder) -> str:
    base, exponent = op.args[0], op.args[1]
    if exponent == 1 and isinstance(base, str):
        return base
    if op.type.dtype in ("int64", "int32"):
        return _integer_power(op, b, base, exponent)
    return b.elementwise("pow", base, exponent)


def _integer_power(op, b: Builder, base, exponent) -> str:
    if not (isinstance(base, str) and isinstance(exponent, int) and 0 <= exponent <= _MAX_INT_EXPONENT):
        raise UnsupportedOpError(f"pow (node {op.name}) of {op.type.dtype}: deplokit computes integer powers "
                                 f"of a tensor to a whole exponent 0..{_MAX_INT_EXPONENT}")
    if exponent == 0:
        return b.elementwise("add", b.elementwise("multiply", base, 0), 1, hint="pow")
    out, square, n = None, base, exponent     # square-and-multiply
    while n:
        if n & 1:
            out = square if out is None else b.elementwise("multiply", out, square, hint="pow")
        n >>= 1
        if n:
            square = b.elementwise("multiply", square, square, hint="pow")
    return out
