"""Shared-memory offsets of a main loop's loads, evaluated, and cut into vector loads.

Kernel-IR index expressions are ints; `evaluate` (or `compile_int`, for many evaluations) computes
one with C's truncating division (ir/index.c_div) for given thread, block and loop values.
`vector_runs` decides which loads nvcc can merge into one LDS.64 / LDS.128: the same offsets
from an aligned base for every sampled thread.
"""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import c_div, c_rem

INT_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: c_div(a, b) if b else 0, "//": lambda a, b: a // b if b else 0,
        "%": lambda a, b: c_rem(a, b) if b else 0, "min": min, "max": max,
        "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "&": lambda a, b: a & b, "|": lambda a, b: a | b,
        "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
        ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b))}


# op -> Python source of a function of (a, b) as INT_OPS computes it; the operands are pure
_SOURCE = {"+": "({a} + {b})", "-": "({a} - {b})", "*": "({a} * {b})",
           "/": "_div({a}, {b})", "//": "_floordiv({a}, {b})", "%": "_rem({a}, {b})",
           "min": "min({a}, {b})", "max": "max({a}, {b})", "<<": "({a} << {b})", ">>": "({a} >> {b})",
           "&": "({a} & {b})", "|": "({a} | {b})", "<": "int({a} < {b})", "<=": "int({a} <= {b})",
           ">": "int({a} > {b})", ">=": "int({a} >= {b})", "==": "int({a} == {b})", "!=": "int({a} != {b})",
           "&&": "int(bool({a}) and bool({b}))", "||": "int(bool({a}) or bool({b}))"}
_SCOPE = {"_div": INT_OPS["/"], "_floordiv": INT_OPS["//"], "_rem": INT_OPS["%"]}


def _source(e) -> str:
    if isinstance(e, K.Const):
        return repr(int(e.value))
    if isinstance(e, (K.Var, K.Special)):
        return f"env.get({e.name!r}, 0)"
    if isinstance(e, K.Binary) and e.op in INT_OPS:
        return _SOURCE[e.op].format(a=_source(e.a), b=_source(e.b))
    if isinstance(e, K.Unary):
        return f"(-{_source(e.a)})" if e.op == "neg" else f"int(not {_source(e.a)})"
    if isinstance(e, K.Select):
        return f"({_source(e.a)} if {_source(e.cond)} else {_source(e.b)})"
    if isinstance(e, K.Cast) and e.ctype != "float":
        return _source(e.a)
    return "0"          # a float, a load: not an index


def compile_int(e):
    """`e` as a function of an environment (name -> int): evaluated many times per kernel
    (every sampled thread and unrolled point), so the tree is walked once, into one Python
    function (the sass model's hottest loop; a tree of closures costs a call a node)."""
    try:
        return eval(f"lambda env: {_source(e)}", dict(_SCOPE))
    except (SyntaxError, RecursionError, MemoryError):   # nested past the parser's limit
        return closure_int(e)


def closure_int(e):
    """`e` as a tree of closures: for an expression too deep to compile as source."""
    if isinstance(e, K.Const):
        value = int(e.value)
        return lambda env: value
    if isinstance(e, (K.Var, K.Special)):
        name = e.name
        return lambda env: env.get(name, 0)
    if isinstance(e, K.Binary) and e.op in INT_OPS:
        op, a, b = INT_OPS[e.op], closure_int(e.a), closure_int(e.b)
        return lambda env: op(a(env), b(env))
    if isinstance(e, K.Unary):
        a = closure_int(e.a)
        return (lambda env: -a(env)) if e.op == "neg" else (lambda env: int(not a(env)))
    if isinstance(e, K.Select):
        c, a, b = closure_int(e.cond), closure_int(e.a), closure_int(e.b)
        return lambda env: a(env) if c(env) else b(env)
    if isinstance(e, K.Cast) and e.ctype != "float":
        return closure_int(e.a)
    return lambda env: 0


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
