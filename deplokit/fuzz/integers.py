"""Integer templates for the fuzzer: int32 / int64 arithmetic with Python's floor semantics.

`//` and `%` round toward minus infinity and take the divisor's sign in torch (and Python),
where C's `/` and `%` truncate toward zero: a negative operand is where a lowering that
forgets this goes wrong, so the values are signed and so are some divisors. Divisors never
hold 0 (torch raises for an integer division by zero). Results go back to float32 so the
chain continues; int reductions accumulate exactly (int64 for an int32 sum, as torch does).
"""
from __future__ import annotations

from .limits import broadcast_shape, dim

INT_TYPES = ("torch.int32", "torch.long")


def _to_int(x, dtype):
    """x as integers of a few hundred at most: a chain must not overflow int32, and a NaN
    must not reach the conversion (torch wraps, saturates or gives INT_MIN differently on
    each device; CUDA's cvt gives 0)."""
    return f"(torch.where({x} == {x}, {x}, 0.0).clamp(-100, 100) * 8).to({dtype})"


def _operand(rng, shape, inp, nonzero):
    """A scalar or a broadcasting integer tensor (size-1 and missing leading dims)."""
    if rng.random() < 0.5:
        v = rng.choice((2, 3, 7, -2, -3, 5) if nonzero else (0, 1, -4, 9))
        return str(v)
    other = broadcast_shape(rng, shape)
    y = inp(other)
    dtype = rng.choice(INT_TYPES)
    if nonzero:                     # |y| * 3 + 1 >= 1, then a sign
        sign = rng.choice(("", "-"))
        return f"({sign}((({y}).abs() * 3).to({dtype}) + 1))"
    return _to_int(y, dtype)


def divmod_(rng, shape, inp):
    """An integer floor division or remainder (and a +, -, * before it), back to float."""
    dtype = rng.choice(INT_TYPES)
    a = f"{_to_int('{x}', dtype)}"
    pre = rng.choice(("", "+", "-", "*"))
    if pre:
        a = f"({a} {pre} {_operand(rng, shape, inp, nonzero=False)})"
    op = rng.choice(("//", "%", "floor_divide", "remainder"))
    b = _operand(rng, shape, inp, nonzero=True)
    expr = f"({a} {op} {b})" if op in ("//", "%") else f"torch.{op}({a}, {b})"
    return f"{expr}.float()", shape


def reduce(rng, shape, inp):
    """An integer sum or max over any dim (kept or not), back to float."""
    if not shape:
        return None
    d = dim(rng, shape) if rng.random() < 0.7 else len(shape) - 1
    keep = rng.random() < 0.5
    out = shape[:d] + ((1,) if keep else ()) + shape[d + 1:]
    which = rng.choice(("sum", "amax", "amin"))
    dtype = rng.choice(INT_TYPES)
    return f"{_to_int('{x}', dtype)}.{which}({d - len(shape)}, keepdim={keep}).float()", out


def float_divmod(rng, shape, inp):
    """Float floor_divide / remainder by a nonzero scalar or tensor of either sign."""
    op = rng.choice(("floor_divide", "remainder"))
    if rng.random() < 0.5:
        b = str(rng.choice((0.75, -0.75, 2.5, -3.0)))
    else:
        other = broadcast_shape(rng, shape)
        b = f"({rng.choice(('', '-'))}({inp(other)}.abs() + 0.5))"
    return f"torch.{op}({{x}} * 4, {b})", shape
