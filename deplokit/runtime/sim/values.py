"""Per-thread values: numpy arrays in their smallest broadcast shape over (blocks, threads).
Dtypes and casts, active masks (None = every thread, NO_THREADS = no thread), and C-style
arithmetic on int64 / float32 operands. Integer values are exact: int64 locals are numpy
int64, int32 locals numpy int32 (a value assigned to one wraps, as C's conversion does); index
arithmetic ("int") is computed in int64 and checked against the kernel's index width."""
from __future__ import annotations

import numpy as np

from ...ir.types import CTYPE_DTYPE
from ..rounding import round_array
from .errors import SimulationError

F32 = np.float32
I64 = np.int64

NO_THREADS = object()   # an empty mask: no thread active


I32 = np.int32


def dtype_of(ctype: str):
    if ctype == "bool":
        return np.bool_
    if ctype == "int32":
        return I32
    if "int" in ctype or ctype in ("long", "size_t", "unsigned"):
        return I64
    return F32


def cast(v, dtype):
    if v.dtype != dtype:
        with np.errstate(invalid="ignore", over="ignore"):
            return v.astype(dtype)
    return v


def cast_to(v, ctype: str):
    """v as a C cast to `ctype` makes it: a cast to a half type rounds to nearest even
    (__float2bfloat16_rn, __float2half_rn), the value held in float32."""
    return round_array(cast(v, dtype_of(ctype)), CTYPE_DTYPE.get(ctype))


def owned(v):
    """A copy when v is a view into mutable storage (register arrays), so that later in-place
    updates of that storage cannot change the variable."""
    if isinstance(v, np.ndarray) and not v.flags.owndata:
        return v.copy()
    return v


def kind_of(v) -> str:
    return v.dtype.kind     # f, i/u, b


def uniform_value(v):
    """The Python value of v if it is the same for every thread (0-d or size 1), else None."""
    if np.ndim(v) == 0:
        return v.item() if isinstance(v, np.ndarray) else v
    if v.size == 1:
        return v.reshape(()).item()
    return None


def as_bool(v):
    return v if v.dtype == np.bool_ else (v != 0)


def narrow(mask, c):
    """The mask of active threads for which c holds: None (all of the chunk), an array,
    the same mask object when c holds for every active thread, or NO_THREADS."""
    s = uniform_value(c)
    if s is not None:
        return mask if s else NO_THREADS
    c = as_bool(c)
    if mask is None:
        if c.all():
            return None
        return c if c.any() else NO_THREADS
    m = mask & c
    if not m.any():
        return NO_THREADS
    if not (mask & ~c).any():
        return mask
    return m


def unify(a, b):
    ka, kb = kind_of(a), kind_of(b)
    if ka == kb:
        return a, b
    if "f" in (ka, kb):
        return cast(a, F32), cast(b, F32)
    return cast(a, I64), cast(b, I64)


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}
BIN_ALIAS = {"add": "+", "subtract": "-", "sub": "-", "multiply": "*", "mul": "*",
              "divide": "/", "div": "/", "mod": "%", "floordiv": "//", "maximum": "max",
              "minimum": "min", "fmaxf": "max", "fminf": "min", "less": "<",
              "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
              "not_equal": "!=", "logical_and": "&&", "logical_or": "||", "and": "&&",
              "or": "||"}
# C's fmaxf / fminf, called by their C names: the other operand where one is NaN (deplokit's
# maximum / minimum, printed as deplokit_fmaxf / deplokit_fminf, propagate it as torch does)
C_MINMAX = {"fmaxf": np.fmax, "fmax": np.fmax, "fminf": np.fmin, "fmin": np.fmin}
CALL_ALIAS = {"max": "maximum", "min": "minimum", "fabs": "abs", "fabsf": "abs", "powf": "pow",
               "rcp": "reciprocal", "__expf": "exp", "__logf": "log", "select": "where"}
LOGICAL_FNS = {"logical_not", "logical_and", "logical_or"}
# ops that stay in int64 when every operand is int or bool (index arithmetic spelled as calls)
INT_FNS = {"add", "subtract", "multiply", "maximum", "minimum", "greater", "less",
            "greater_equal", "less_equal", "equal", "not_equal", "neg", "abs"}


def _c_div(a, b):
    q = np.floor_divide(a, b)
    neg = q < 0
    if np.any(neg):   # signs differ: C truncates toward zero
        q = q + (neg & (a - q * b != 0))
    return q


_FLOAT_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.minimum,
                 "max": np.maximum, "%": np.fmod, "//": lambda a, b: np.floor(np.divide(a, b)),
                 "pow": np.power, "**": np.power}
_INT_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": _c_div,
               "//": np.floor_divide, "%": np.fmod, "min": np.minimum, "max": np.maximum,
               "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor, "<<": np.left_shift,
               ">>": np.right_shift, "pow": np.power, "**": np.power}
_BOOL_BINARY = {"&": np.logical_and, "|": np.logical_or, "^": np.logical_xor}


def binary_values(op, a, b):
    if op in _CMP:
        a, b = unify(a, b)
        return _CMP[op](a, b)
    ka, kb = kind_of(a), kind_of(b)
    if ka == "f" or kb == "f":
        if op not in _FLOAT_BINARY:
            raise SimulationError(f"operator {op!r} is not defined on float operands")
        return _FLOAT_BINARY[op](cast(a, F32), cast(b, F32))
    if ka == "b" and kb == "b" and op in _BOOL_BINARY:
        return _BOOL_BINARY[op](a, b)
    if op not in _INT_BINARY:
        raise SimulationError(f"unknown binary operator {op!r}")
    return _INT_BINARY[op](cast(a, I64), cast(b, I64))


def last_per_key(keys):
    """Indices of the last occurrence of each distinct key (keys are in lane order)."""
    rev = keys[::-1]
    _, first = np.unique(rev, return_index=True)
    return keys.size - 1 - first
