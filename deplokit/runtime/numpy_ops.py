"""Numpy meaning of every Tensor-IR / Loop-IR elementwise op, shared by both interpreters.

Arithmetic stays in float32 (scalars are cast first so numpy never widens to float64), except
integer arithmetic, which is exact at integer width."""
from __future__ import annotations

import numpy as np

from .rounding import round_array, round_to

F32 = np.float32


def _erf(x):
    # erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n x / (2n+1)!!, in float64: every term has
    # x's sign, so nothing cancels and small |x| keeps full relative accuracy (the old
    # Abramowitz & Stegun 7.1.26 form was off by up to 1.5e-7 absolute, i.e. wrong in
    # relative terms near 0). |x| >= 4 is +-1 in float32 (erfc(4) = 1.5e-8 < half an ulp).
    x64 = np.clip(np.asarray(x, dtype=np.float64), -4.0, 4.0)
    two_x2 = 2.0 * x64 * x64
    term = x64.copy()
    total = x64.copy()
    for n in range(1, 80):   # |x| = 4 converges by n ~ 60
        term *= two_x2 / (2 * n + 1)
        total += term
        if n % 8 == 0 and not np.any(np.abs(term) > 1e-17 * np.abs(total)):
            break
    return (2.0 / np.sqrt(np.pi) * np.exp(-x64 * x64) * total).astype(F32)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def _relu(x):
    return np.maximum(x, np.zeros((), np.asarray(x).dtype))    # an int32 zero keeps int32 exact


def _where(c, a, b):
    return np.where(np.asarray(c, dtype=bool), a, b)


def _float_remainder(a, b):
    """torch.remainder on floats: fmod, moved by b where its sign differs from b's."""
    m = np.fmod(a, b)
    return np.where((m != 0) & ((m < 0) != (b < 0)), m + b, m)


def _float_floor_divide(a, b):
    """torch's div_floor on floats (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp): the
    quotient of a - fmod(a, b), corrected to the floor, rounded to the nearer whole number."""
    m = np.fmod(a, b)
    q = (a - m) / b
    q = np.where((m != 0) & ((b < 0) != (m < 0)), q - 1, q)
    f = np.floor(q)
    f = np.where(q - f > 0.5, f + 1, f)
    exact = np.where(b == 0, a / b, np.where(q == 0, np.copysign(np.zeros_like(q), a / b), f))
    return exact


def _floor_divide(a, b):
    if _floating(a, b):
        return _float_floor_divide(a, b)
    return np.floor_divide(a, b)       # integers: Python's (and torch's) floor semantics


def _remainder(a, b):
    if _floating(a, b):
        return _float_remainder(a, b)
    return np.remainder(a, b)          # the sign of the divisor, as torch


def _floating(*xs) -> bool:
    return any(np.asarray(x).dtype.kind == "f" for x in xs)


OPS = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: F32(1) / np.sqrt(x), "reciprocal": lambda x: F32(1) / x,
    "tanh": np.tanh, "erf": _erf, "sigmoid": _sigmoid, "relu": _relu,
    "sin": np.sin, "cos": np.cos, "logical_not": np.logical_not,
    "trunc": lambda x: np.trunc(x).astype(np.int64),   # only float -> int casts use it: an integer
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
    "greater": np.greater, "less": np.less, "greater_equal": np.greater_equal,
    "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "floor_divide": _floor_divide, "remainder": _remainder,
    "floor": np.floor,        # Kernel IR's floorf (a float floor division's steps)
    "where": _where,
    # A change of storage type (half <-> float32): the value itself; `apply` rounds it when
    # the result's dtype is a half one.
    "convert": lambda x: np.asarray(x).astype(F32) if np.asarray(x).dtype.kind in "iub" else x,
    "round_tf32": lambda x: round_to(x, "tf32"),     # an mma operand's TF32 value, held in float32
}

REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


# Ops exact on integers: with integer operands (and integral constants) they are computed at
# integer width, as torch does, not in float32 (which is exact only up to 2**24).
_INT_EXACT = frozenset({"neg", "abs", "add", "subtract", "multiply", "maximum", "minimum", "floor_divide",
                        "remainder", "greater", "less", "greater_equal", "less_equal", "equal", "not_equal",
                        "where"})
# The numpy type of each dtype: the one table every executor of the IRs reads. A half tensor
# is held in float32, each value one the half format represents (rounding.py makes them so).
NP_DTYPES = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "bool": np.bool_,
             "bfloat16": np.float32, "float16": np.float32}


def _integer_operands(op: str, args: list) -> bool:
    if op not in _INT_EXACT:
        return False
    values = args[1:] if op == "where" else args
    arrays = [a for a in values if isinstance(a, (np.ndarray, np.generic))]
    return bool(arrays) and all(np.issubdtype(a.dtype, np.integer) for a in arrays) and all(
        float(a).is_integer() for a in values if isinstance(a, float))


def apply(op: str, args: list, dtype: str | None = None):
    """op on numpy operands; with `dtype` (the IR value's), the result held at that dtype, so
    int32 arithmetic wraps and a cast node converts, as torch does."""
    if dtype in ("int64", "int32", "bool") and op != "trunc":
        # an integer result: integral float constants are integers (Loop IR holds them as floats)
        args = [np.int64(a) if isinstance(a, float) and a.is_integer() else a for a in args]
    if _integer_operands(op, args):
        args = [np.int64(a) if isinstance(a, float) else a for a in args]
        with np.errstate(over="ignore", divide="ignore"):
            out = OPS[op](*args)
    else:
        args = [F32(a) if isinstance(a, float) else a for a in args]
        if dtype == "float32":     # int operands of a float op (true division, a cast) convert first
            args = [_as_float(a) for a in args]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = OPS[op](*args)
        if isinstance(out, (np.ndarray, np.generic)) and out.dtype == np.float64:
            out = out.astype(F32)
    if dtype is not None and isinstance(out, (np.ndarray, np.generic)) and out.dtype != NP_DTYPES[dtype]:
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.asarray(out).astype(NP_DTYPES[dtype])
    return round_array(out, dtype)     # a value of a half dtype: rounded to nearest even


def _as_float(a):
    if isinstance(a, (np.ndarray, np.generic)) and a.dtype.kind in "iub":
        return a.astype(F32)
    return a
