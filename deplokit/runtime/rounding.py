"""Rounding float32 values to the narrower formats the hardware stores or multiplies in, exactly
as it does: round to nearest, ties to even (docs/precision.md).

Every executor holds a half tensor as float32 values that the half format represents exactly
(a bf16 or fp16 value is exact in float32), so a store to a half buffer, a `convert` to half
and a TF32 matmul input are all one call here:

    bfloat16   8 significand bits, float32's exponent: keep the top 16 bits of the float32 word
    float16    11 significand bits, exponent -14..15: numpy's float16 cast (IEEE RNE; overflow
               to inf, subnormals below 2**-14)
    tf32       11 significand bits, float32's exponent: what mma.sync reads of a float32 operand
"""
from __future__ import annotations

import numpy as np

# Significand bits of float32 each format drops: bf16 keeps 7 stored bits, tf32 keeps 10.
_DROPPED_BITS = {"bfloat16": 16, "tf32": 13}


def _round_mantissa(x, dropped: int) -> np.ndarray:
    """float32 `x` rounded to nearest even at `dropped` low bits of the word: add half an ulp of
    the kept part, minus one unless the kept part's last bit is set (ties go to the even
    neighbour), then clear the dropped bits. A carry out of the significand bumps the exponent
    (the largest finite values round to inf, as on the device); NaN stays NaN (quiet, sign kept),
    inf stays inf."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    keep_lsb = (bits >> np.uint64(dropped)) & np.uint64(1)
    half = np.uint64((1 << (dropped - 1)) - 1)
    rounded = ((bits + half + keep_lsb) >> np.uint64(dropped)) << np.uint64(dropped)
    out = (rounded & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
    nan = np.isnan(f)
    if nan.any():   # a NaN whose payload sits in the dropped bits must not round to inf
        quiet = (f.view(np.uint32) | np.uint32(0x00400000)) & np.uint32(~((1 << dropped) - 1) & 0xFFFFFFFF)
        out = np.where(nan, quiet.view(np.float32), out)
    return out.reshape(np.shape(x))


def round_to(x, fmt: str):
    """float32 values of `x` rounded to `fmt` (bfloat16, float16 or tf32), held in float32."""
    if fmt == "float16":
        with np.errstate(over="ignore"):
            return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    return _round_mantissa(x, _DROPPED_BITS[fmt])


def round_array(x, fmt: str | None):
    """`x` rounded to `fmt`, or `x` itself for a format that needs no rounding (None, float32,
    an integer type)."""
    if fmt in ("bfloat16", "float16", "tf32"):
        return round_to(x, fmt)
    return x
