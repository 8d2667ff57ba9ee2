"""Floating-point formats deplokit stores and multiplies in, and the tolerances `check()` derives
from them (docs/precision.md).

A format's unit roundoff u = 2**-p (p significand bits, the implicit one counted) bounds the
relative error of one rounding to nearest. `check()` compares a program against two references:

- eager in the program's own dtypes (bf16 eager rounds every intermediate): a handful of
  roundings along a chain, rtol = CHAIN * u; where values cancel (x - mean, a sum of K terms
  of both signs, each rounded by eager) the error is relative to the terms, not the result, and
  ~sqrt(K) of them add up: atol = u * (CHAIN + sqrt(K)) * max|expected|;
- the same program in float32 (inputs and weights exactly as given, every op in float32): deplokit
  rounds only where it stores a half tensor, so each element is off by its last rounding,
  ROUNDINGS * u relative (a float32 sum in another order may tip a near-tie: two ulps), plus
  float32's own summation noise (default_atol), and nothing relative to the largest output.

TF32 (`precision="tf32"`, float32 programs only) rounds a matmul's operands to 11 significand
bits and accumulates in float32: each product is off by <= 2u relative, a sum of K of them by
~2u * sqrt(K) * max|term|; it is compared with float32 eager at the same rounding_tolerance.
"""
from __future__ import annotations

import math

from .errors import ConfigError
from .ir.types import HALF_DTYPES

# Significand bits (with the implicit one) of each format.
SIGNIFICAND_BITS = {"float32": 24, "tf32": 11, "float16": 11, "bfloat16": 8}


def unit_roundoff(fmt: str) -> float:
    """u = 2**-p: 2**-8 for bfloat16, 2**-11 for float16 and tf32, 2**-24 for float32."""
    return 2.0 ** -SIGNIFICAND_BITS[fmt]


# How a float32 program's matmuls multiply: exactly in float32 (FFMA), or with TF32 operands
# (mma.sync ...tf32, as torch's allow_tf32). Recorded on the Tile IR (TileKernel.precision) by
# the blockify pass; the simulator and the interpreters round matmul operands when it is "tf32".
PRECISIONS = ("float32", "tf32")
DEFAULT_PRECISION = "float32"

# Roundings along a chain that eager does and deplokit does not (silu(x) * y + 1.5 rounds three
# times; torch's CPU kernels round a softmax or a norm once): the few a comparison allows.
CHAIN = 4
# deplokit's own roundings against the float32 reference: the store, and one for the inputs'
# float32 noise carried through it.
ROUNDINGS = 2


def check_precision(precision: str, dtypes) -> str:
    """`precision` validated for a program whose buffers have `dtypes`: tf32 is a choice for
    float32 programs (a half program already multiplies in half)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; supported: {', '.join(PRECISIONS)}")
    if precision == "tf32" and any(d in HALF_DTYPES for d in dtypes):
        raise ConfigError("precision='tf32' applies to float32 programs; this one stores "
                          f"{', '.join(sorted(set(d for d in dtypes if d in HALF_DTYPES)))} tensors")
    return precision


def rounding_tolerance(fmt: str, reduction: int) -> tuple[float, float]:
    """(rtol, atol per unit of output magnitude) against eager (in `fmt` for a half program, in
    float32 for a TF32 one), for a program whose longest reduction sums `reduction` terms."""
    u = unit_roundoff(fmt)
    return CHAIN * u, u * (CHAIN + math.sqrt(max(1, reduction)))


def exact_tolerance(dtype: str) -> float:
    """rtol against the float32 reference, for an output stored in `dtype`: deplokit rounds once,
    where it stores (its atol is float32's default alone)."""
    return ROUNDINGS * unit_roundoff(dtype)
