"""The elementwise primitives of Tensor IR and Loop IR, each once: its arity, the dtype of its
result, its numpy meaning (both interpreters and the simulator), its CUDA spelling, its cost
class and whether the fuzzer draws it alone. Every table of the compiler reads this one:

    tensor_ir            the op names by arity, the float-result ops
    decompose/unary      the aten ops that are a primitive one to one (`aten`)
    frontend/aten_table  their `name.default` entries
    runtime/numpy_ops    `numpy`
    ir/value_expr        the ops computed as C float math (`result == "float"`, and pow)
    lower/cuda           `cuda`: a C float function (expf), or an operator (+) of Kernel IR's Call
    analysis/work        `slots`: special-function-unit ops issue slower
    tune/main_loop       `slots`, per call
    fuzz/templates       `fuzz`: a torch expression of {x} that exercises the op alone

Adding a float math function (torch.sinh) is one Op here; a rule of its own, where torch's op is
not one primitive, goes in passes/decompose/.

Integer semantics are torch's (exact at integer width, floor division and modulo with the
divisor's sign); float arithmetic stays float32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

F32 = np.float32


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    result: str                 # float: float32 whatever the operands | bool | same: the operands' promoted dtype
    numpy: Callable | None      # the meaning, on numpy operands (runtime/numpy_ops.apply picks their width)
    cuda: str = ""              # C float function ("expf") or C operator ("+"); "": the renderer spells it itself
    slots: int = 0              # issue slots of one call (0: one FP32 instruction; SFU functions more)
    aten: tuple[str, ...] = ()  # aten ops (`NAME.default`) that are this primitive, one operand
    fuzz: str = ""              # torch expression of {x} exercising the op alone ("": no template)
    fuzz_also: tuple[str, ...] = ()   # other aten ops that expression uses


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


def _floating(*xs) -> bool:
    return any(np.asarray(x).dtype.kind == "f" for x in xs)


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
    return np.where(b == 0, a / b, np.where(q == 0, np.copysign(np.zeros_like(q), a / b), f))


def _floor_divide(a, b):
    if _floating(a, b):
        return _float_floor_divide(a, b)
    return np.floor_divide(a, b)       # integers: Python's (and torch's) floor semantics


def _remainder(a, b):
    if _floating(a, b):
        return _float_remainder(a, b)
    return np.remainder(a, b)          # the sign of the divisor, as torch


_TABLE = (
    # unary
    Op("neg", 1, "same", np.negative, aten=("neg",), fuzz="-{x}"),
    Op("abs", 1, "same", np.abs, "fabsf", aten=("abs",)),
    Op("exp", 1, "float", np.exp, "expf", 2, ("exp",), "torch.exp({x}.clamp(-20, 20))", ("clamp",)),
    Op("log", 1, "float", np.log, "logf", 2, ("log",), "torch.log({x}.abs() + 1)", ("abs", "add")),
    Op("sqrt", 1, "float", np.sqrt, "sqrtf", 3, ("sqrt",), "torch.sqrt({x}.abs())", ("abs",)),
    Op("rsqrt", 1, "float", lambda x: F32(1) / np.sqrt(x), "rsqrtf", 1, ("rsqrt",),
       "torch.rsqrt({x}.abs() + 0.5)", ("abs", "add")),
    Op("reciprocal", 1, "float", lambda x: F32(1) / x, "", 3, ("reciprocal",),
       "torch.reciprocal({x}.abs() + 0.5)", ("abs", "add")),
    Op("tanh", 1, "float", np.tanh, "tanhf", 4, ("tanh",), "torch.tanh({x})"),
    Op("erf", 1, "float", _erf, "erff", 8, ("erf",), "torch.erf({x})"),
    Op("sigmoid", 1, "float", _sigmoid, "", 4, ("sigmoid",), "torch.sigmoid({x})"),
    Op("relu", 1, "same", _relu, aten=("relu",), fuzz="torch.relu({x})"),
    Op("sin", 1, "float", np.sin, "sinf", 6, ("sin",), "torch.sin({x})"),
    Op("cos", 1, "float", np.cos, "cosf", 6, ("cos",), "torch.cos({x})"),
    Op("log1p", 1, "float", np.log1p, "log1pf", 4, ("log1p",), "torch.log1p({x}.abs())", ("abs",)),
    Op("expm1", 1, "float", np.expm1, "expm1f", 4, ("expm1",), "torch.expm1({x}.clamp(-3, 3))", ("clamp",)),
    Op("log2", 1, "float", np.log2, "log2f", 2, ("log2",), "torch.log2({x}.abs() + 1)", ("abs", "add")),
    Op("log10", 1, "float", np.log10, "log10f", 2, ("log10",), "torch.log10({x}.abs() + 1)", ("abs", "add")),
    Op("exp2", 1, "float", np.exp2, "exp2f", 1, ("exp2",), "torch.exp2({x}.clamp(-4, 4))", ("clamp",)),
    Op("sinh", 1, "float", np.sinh, "sinhf", 4, ("sinh",), "torch.sinh({x}.clamp(-3, 3))", ("clamp",)),
    Op("cosh", 1, "float", np.cosh, "coshf", 4, ("cosh",), "torch.cosh({x}.clamp(-3, 3))", ("clamp",)),
    Op("tan", 1, "float", np.tan, "tanf", 8, ("tan",), "torch.tan({x}.clamp(-1.5, 1.5))", ("clamp",)),
    Op("atan", 1, "float", np.arctan, "atanf", 6, ("atan",), "torch.atan({x})"),
    Op("asin", 1, "float", np.arcsin, "asinf", 6, ("asin",), "torch.asin({x}.clamp(-0.9, 0.9))", ("clamp",)),
    Op("acos", 1, "float", np.arccos, "acosf", 6, ("acos",), "torch.acos({x}.clamp(-0.9, 0.9))", ("clamp",)),
    # float to a whole float (passes/decompose/rounding.py; an integer operand is its own result):
    # round is half to even, as torch.round; truncate toward zero, unlike `trunc`, keeps the float
    Op("floor", 1, "same", np.floor, "floorf"),
    Op("ceil", 1, "same", np.ceil, "ceilf"),
    Op("round", 1, "same", np.rint, "rintf"),
    Op("truncate", 1, "same", np.trunc, "truncf"),
    Op("logical_not", 1, "bool", np.logical_not, aten=("logical_not",)),
    Op("trunc", 1, "int64", lambda x: np.trunc(x).astype(np.int64), "truncf"),   # float -> int casts only
    # A change of storage type, half <-> float32 (the node's dtype says to which): to float32 exact,
    # to a half dtype rounded to nearest even by runtime/numpy_ops.apply (docs/precision.md). The
    # only op whose operand or result may be a half dtype; every other op computes in float32.
    Op("convert", 1, "same", lambda x: np.asarray(x).astype(F32) if np.asarray(x).dtype.kind in "iub" else x),
    # A float32 matmul operand rounded to TF32 (nearest even, 10 stored significand bits) where the
    # program is compiled with precision="tf32": what mma.sync's tf32 inputs hold. Its numpy
    # meaning is runtime/rounding.py's (numpy_ops supplies it: ir knows nothing of runtime).
    Op("round_tf32", 1, "same", None),
    # binary
    Op("add", 2, "same", np.add, "+"),
    Op("subtract", 2, "same", np.subtract, "-"),
    Op("multiply", 2, "same", np.multiply, "*"),
    Op("divide", 2, "float", np.divide, "/", 6),
    Op("floor_divide", 2, "same", _floor_divide),
    Op("remainder", 2, "same", _remainder),
    Op("maximum", 2, "same", np.maximum),         # NaN-propagating: lower/cuda.py's deplokit_fmaxf
    Op("minimum", 2, "same", np.minimum),
    Op("pow", 2, "same", np.power, "powf", 8),
    Op("atan2", 2, "float", np.arctan2, "atan2f", 8),
    Op("hypot", 2, "float", np.hypot, "hypotf", 4),
    Op("greater", 2, "bool", np.greater, ">"),
    Op("less", 2, "bool", np.less, "<"),
    Op("greater_equal", 2, "bool", np.greater_equal, ">="),
    Op("less_equal", 2, "bool", np.less_equal, "<="),
    Op("equal", 2, "bool", np.equal, "=="),
    Op("not_equal", 2, "bool", np.not_equal, "!="),
    Op("logical_and", 2, "bool", np.logical_and, "&&"),
    Op("logical_or", 2, "bool", np.logical_or, "||"),
    # ternary
    Op("where", 3, "same", _where),
)
OPS: dict[str, Op] = {op.name: op for op in _TABLE}


def ops_of_arity(n: int) -> tuple[str, ...]:
    return tuple(op.name for op in _TABLE if op.arity == n)


def is_c_operator(spelling: str) -> bool:
    return bool(spelling) and not spelling[0].isalpha()
