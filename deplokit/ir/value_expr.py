"""One Loop-IR value as Kernel IR, computed at its dtype (ir/types.DTYPE_CTYPE): integers
exactly, in `long long` or `int`, with explicit casts where floats and integers meet, as torch
computes them:

- int / int (`divide`) is float division: both operands are cast to float first;
- a float -> int cast (`trunc`) truncates toward zero (a C cast);
- comparisons promote as arithmetic does (an int64 against a float compares as float32);
- `floor_divide` and `remainder` round toward -inf (C's / and % truncate: corrected here);
- min / max of integers are integer min / max (never fmaxf, which would go through float).

`lower_value` returns the statements that declare the value (a float floor division needs
temporaries) and is the one place the lowering decides a value's C type."""
from __future__ import annotations

from . import kernel_ir as K
from .ops import OPS
from .tensor_ir import COMPARISON_OPS, CONVERT_OP
from .types import DTYPE_CTYPE, holds_int64

# The combine of each reduction, as an elementwise op.
COMBINE_OP = {"sum": "add", "max": "maximum", "min": "minimum"}
# Ops computed as C math functions on floats (their integer operands are cast to float): the
# float-result primitives (ir/ops.py), and pow (powf)
_FLOAT_ONLY = {name for name, op in OPS.items() if op.result == "float"} | {"pow"}
_RANK = {"bool": 0, "int32": 1, "int64": 2, "float32": 3}


def ctype_of(dtype: str) -> str:
    return DTYPE_CTYPE.get(dtype, "float")


def promote(dtypes) -> str:
    """torch's promotion among operand dtypes: float32 > int64 > int32 > bool."""
    return max(dtypes, key=lambda d: _RANK.get(d, 3), default="float32")


def lower_value(dst: str, op: str, args: list[tuple[K.Expr, str]], dtype: str, fresh) -> list:
    """Declarations computing `dst = op(args)` at `dtype`. args: (expression, dtype) pairs
    (a constant's dtype is None: it takes the type of the computation); fresh(prefix) names a
    temporary."""
    ctype = ctype_of(dtype)
    pre: list = []
    value = op_expr(op, args, dtype, pre, fresh)
    return pre + [K.Declare(dst, ctype, value)]


def op_expr(op: str, args, dtype: str, pre: list, fresh) -> K.Expr:
    if op == CONVERT_OP:                 # half <-> float: the one place a value changes storage type
        return _as(args[0], dtype)
    if op == "trunc":                    # float -> int: a C cast truncates toward zero
        return K.Cast(ctype_of(dtype), _as(args[0], "float32"))
    if op == "where":
        c, a, b = args
        t = dtype if dtype != "bool" else _operand_dtype((a, b), "bool")
        return K.Select(_as(c, "bool"), _as(a, t), _as(b, t))
    if op in COMPARISON_OPS:
        if op in ("logical_and", "logical_or", "logical_not"):
            return K.Call(op, tuple(_as(a, "bool") for a in args))
        t = _operand_dtype(args, "float32")
        return K.Call(op, tuple(_as(a, t) for a in args))
    t = "float32" if op in _FLOAT_ONLY or dtype == "float32" else dtype
    xs = [_as(a, t) for a in args]
    if t == "float32":
        if op == "floor_divide":
            return _float_floor_divide(xs[0], xs[1], pre, fresh)
        if op == "remainder":
            return _float_remainder(xs[0], xs[1], pre, fresh)
        return K.Call(op, tuple(xs))
    if op == "relu":
        return K.Binary("max", xs[0], constant(0, t))
    if op in ("maximum", "minimum"):
        return K.Binary("max" if op == "maximum" else "min", xs[0], xs[1])
    if op == "floor_divide":
        return _int_floor_divide(xs[0], xs[1], ctype_of(t))
    if op == "remainder":
        return _int_remainder(xs[0], xs[1])
    return K.Call(op, tuple(xs))


def _operand_dtype(args, default: str) -> str:
    """The type two operands are compared (or selected) in: their promotion, float32 where a
    constant is no whole number (an int64 below 2.5 compares as float, as torch does) or one
    past int64 (below 1e19 too: no integer holds it); int64 where a bool meets a whole number
    (mask > -1 is true, as in torch: not a compare with the bool -1 would be)."""
    dtypes = [d for _, d in args if d is not None]
    for e, d in args:
        if d is not None or not isinstance(e, K.Const) or isinstance(e.value, bool):
            continue
        if not isinstance(e.value, int) and not holds_int64(e.value):
            dtypes.append("float32")
        elif all(t == "bool" for _, t in args if t is not None):
            dtypes.append("int64")
    return promote(dtypes or [default])


def combine_expr(reduction: str, acc: K.Expr, value: K.Expr, dtype: str) -> K.Expr:
    """acc folded with value by `reduction`, at the accumulator's dtype."""
    return op_expr(COMBINE_OP[reduction], [(acc, dtype), (value, dtype)], dtype, [], None)


def constant(value, dtype: str) -> K.Const:
    """A constant of `dtype`: an integer one exact (never through float)."""
    if dtype == "bool":
        return K.Const(bool(value), "bool")
    if dtype in ("int64", "int32"):
        if value != value or value in (float("inf"), float("-inf")) or int(value) != value:
            raise ValueError(f"constant {value!r} is not an integer of {dtype}")
        return K.Const(int(value), ctype_of(dtype))
    return K.Const(float(value), "float")


def _as(arg: tuple[K.Expr, str | None], dtype: str) -> K.Expr:
    e, have = arg
    if have is None:                     # a constant: spelled in the computation's type
        return constant(e.value, dtype) if isinstance(e, K.Const) else e
    if have == dtype or (have != "float32" and dtype != "float32" and dtype != "bool"
                         and have in _RANK and dtype in _RANK and _RANK[have] <= _RANK[dtype]):
        return e                          # C widens bool and int32 to int64 exactly by itself
    return K.Cast(ctype_of(dtype), e)


def _signs_differ(a: K.Expr, b: K.Expr) -> K.Expr:
    return K.Binary("!=", K.Binary("<", a, K.Const(0, "int")), K.Binary("<", b, K.Const(0, "int")))


def _int_floor_divide(a, b, ctype) -> K.Expr:
    """C's / truncates; one less where the remainder is not zero and the signs differ."""
    inexact = K.Binary("&&", K.Binary("!=", K.Binary("%", a, b), K.Const(0, "int")), _signs_differ(a, b))
    return K.Binary("-", K.Binary("/", a, b), K.Cast(ctype, inexact))


def _int_remainder(a, b) -> K.Expr:
    """C's % takes the dividend's sign; torch's takes the divisor's."""
    r = K.Binary("%", a, b)
    fix = K.Binary("&&", K.Binary("!=", r, K.Const(0, "int")), _signs_differ(r, b))
    return K.Select(fix, K.Binary("+", r, b), r)


def _float_remainder(a, b, pre, fresh) -> K.Expr:
    m = fresh("fmod")
    pre.append(K.Declare(m, "float", K.Binary("%", a, b)))          # fmodf
    fix = K.Binary("&&", K.Binary("!=", K.Var(m), K.Const(0.0)), _signs_differ(K.Var(m), b))
    return K.Select(fix, K.Binary("+", K.Var(m), b), K.Var(m))


def _float_floor_divide(a, b, pre, fresh) -> K.Expr:
    """torch's div_floor for floats: (a - fmod(a, b)) / b, one less where fmod's sign differs
    from b's, then floored and rounded to the nearer whole number; a / b where b is 0."""
    m, q, f = fresh("fmod"), fresh("quot"), fresh("floor")
    pre.append(K.Declare(m, "float", K.Binary("%", a, b)))
    div = K.Binary("/", K.Binary("-", a, K.Var(m)), b)
    fix = K.Binary("&&", K.Binary("!=", K.Var(m), K.Const(0.0)), _signs_differ(K.Var(m), b))
    pre.append(K.Declare(q, "float", K.Select(fix, K.Binary("-", div, K.Const(1.0)), div)))
    pre.append(K.Declare(f, "float", K.Call("floor", (K.Var(q),))))
    rounded = K.Select(K.Binary(">", K.Binary("-", K.Var(q), K.Var(f)), K.Const(0.5)),
                       K.Binary("+", K.Var(f), K.Const(1.0)), K.Var(f))
    return K.Select(K.Binary("==", b, K.Const(0.0)), K.Binary("/", a, b), rounded)
