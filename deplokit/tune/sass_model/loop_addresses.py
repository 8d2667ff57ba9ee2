"""Shared-memory offsets of a main loop's loads, evaluated, and cut into vector loads.

Kernel-IR index expressions are ints; `evaluate` (or `compile_int`, for many evaluations) computes
one with C's truncating division (ir/index.c_div) for given thread, block and loop values.
`vector_runs` decides which loads nvcc can merge into one LDS.64 / LDS.128: the same offsets
from an aligned base for every sampled thread.
"""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import c_div, c_rem

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: c_div(a, b) if b else 0, "//": lambda a, b: a // b if b else 0,
        "%": lambda a, b: c_rem(a, b) if b else 0, "min": min, "max": max,
        "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "&": lambda a, b: a & b, "|": lambda a, b: a | b,
        "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
        ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b))}


def compile_int(e):
    """`e` as a function of an environment (name -> int): evaluated many times per kernel
    (every sampled thread and unrolled point), so the tree is walked once."""
    if isinstance(e, K.Const):
        value = int(e.value)
        return lambda env: value
    if isinstance(e, (K.Var, K.Special)):
        name = e.name
        return lambda env: env.get(name, 0)
    if isinstance(e, K.Binary) and e.op in _OPS:
        op, a, b = _OPS[e.op], compile_int(e.a), compile_int(e.b)
        return lambda env: op(a(env), b(env))
    if isinstance(e, K.Unary):
        a = compile_int(e.a)
        return (lambda env: -a(env)) if e.op == "neg" else (lambda env: int(not a(env)))
    if isinstance(e, K.Select):
        c, a, b = compile_int(e.cond), compile_int(e.a), compile_int(e.b)
        return lambda env: a(env) if c(env) else b(env)
    if isinstance(e, K.Cast) and e.ctype != "float":
        return compile_int(e.a)
    return lambda env: 0          # a float, a load: not an index


def evaluate(e, env: dict) -> int:
    return compile_int(e)(env)


def vector_runs(array: str, samples: list) -> list[tuple[int, list]]:
    """[(width, keys)] of one array: runs proposed on the first sample, kept if every sample
    has them contiguous from an aligned base; the rest single loads."""
    first = samples[0][array]
    key_of: dict[int, tuple] = {}
    for key, a in sorted(first.items()):
        key_of.setdefault(a, key)
    left = set(key_of)

    def holds(base: int, width: int) -> bool:
        keys = [key_of[base + i] for i in range(width)]
        for sample in samples:
            got = [sample[array][k] for k in keys]
            if got[0] % width or any(got[i] != got[0] + i for i in range(width)):
                return False
        return True
    runs = []
    for width in (4, 2):
        for a in sorted(left):
            run = [a + i for i in range(width)]
            if a % width == 0 and all(x in left for x in run) and holds(a, width):
                left -= set(run)
                runs.append((width, [key_of[x] for x in run]))
    return runs + [(1, [key_of[a]]) for a in sorted(left)]
