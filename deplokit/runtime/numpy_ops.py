"""Numpy meaning of every Tensor-IR / Loop-IR elementwise op (ir/ops.py), shared by both
interpreters and the simulator.

Arithmetic stays in float32 (scalars are cast first so numpy never widens to float64), except
integer arithmetic, which is exact at integer width."""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS as PRIMITIVES
from ..ir.types import holds_int64
from .rounding import round_array, round_to

F32 = np.float32


# every elementwise primitive's meaning (ir/ops.py; round_tf32's is runtime/rounding.py's), and
# Kernel IR's floorf (a float floor division's steps)
OPS = ({name: op.numpy for name, op in PRIMITIVES.items() if op.numpy is not None}
       | {"round_tf32": lambda x: round_to(x, "tf32"), "floor": np.floor})

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
        holds_int64(a) for a in values if isinstance(a, float))


def apply(op: str, args: list, dtype: str | None = None):
    """op on numpy operands; with `dtype` (the IR value's), the result held at that dtype, so
    int32 arithmetic wraps and a cast node converts, as torch does."""
    if dtype in ("int64", "int32", "bool") and op != "trunc":
        # an integer result: integral float constants are integers (Loop IR holds them as floats)
        # (those int64 holds: x < -3.4e38 compares with the float)
        args = [np.int64(a) if isinstance(a, float) and holds_int64(a) else a for a in args]
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
