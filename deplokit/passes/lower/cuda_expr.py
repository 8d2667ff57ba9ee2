"""Kernel IR -> CUDA C++, the expression half of the renderer (see deplokit.passes.lower.cuda
for the whole contract): the C types of buffers and scalars, exact float and int literals,
C operator precedence, the elementwise-function tables, the scope of visible names, and
`ExprRenderer`, which prints an expression with the parentheses a reader wants.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.kernel_ir import (Binary, Call, Cast, Const, GlobalLoad, Param, RegLoad, Select, SharedLoad, Shuffle,
                             Special, Unary, Var)

INDENT = "    "

# C element type of a buffer parameter, and of a scalar variable ("int", the type of index
# arithmetic, is `long long` in a kernel stamped index_bits=64: _Renderer.c_type).
PARAM_CTYPES = {"float": "float", "float32": "float", "int64": "long long", "int32": "int",
                "int": "int", "bool": "bool", "bf16": "__nv_bfloat16", "f16": "__half"}
SCALAR_CTYPES = {"float": "float", "int": "int", "bool": "bool", "int64": "long long",
                 "int32": "int", "bf16": "__nv_bfloat16", "f16": "__half"}
# The Kernel-IR type of a value read from a buffer of each parameter ctype.
_PARAM_VALUE_TYPE = {"float": "float", "float32": "float", "int64": "int64", "int32": "int32",
                     "int": "int32", "bool": "bool", "bf16": "bf16", "f16": "f16"}
_VALUE_TYPES = ("float", "int", "int64", "int32", "bool", "bf16", "f16")
# Half <-> float, always through the intrinsics (cuda_bf16.h, cuda_fp16.h): round to nearest
# even one way, exact the other; never C's implicit conversion operators.
TO_HALF = {"bf16": "__float2bfloat16_rn", "f16": "__float2half_rn"}
FROM_HALF = {"bf16": "__bfloat162float", "f16": "__half2float"}
HALF_HEADERS = {"__nv_bfloat16": "#include <cuda_bf16.h>", "__half": "#include <cuda_fp16.h>"}
# Integer types by width, for the type of a mixed expression (C's usual conversions).
_INT_RANK = {"bool": 0, "int32": 1, "int": 1, "int64": 2}

SPECIALS = {
    "tid.x": "threadIdx.x", "tid.y": "threadIdx.y", "tid.z": "threadIdx.z",
    "bid.x": "blockIdx.x", "bid.y": "blockIdx.y", "bid.z": "blockIdx.z",
    "bdim.x": "blockDim.x", "bdim.y": "blockDim.y", "bdim.z": "blockDim.z",
    "ntid.x": "blockDim.x", "ntid.y": "blockDim.y", "ntid.z": "blockDim.z",
    "gdim.x": "gridDim.x", "gdim.y": "gridDim.y", "gdim.z": "gridDim.z",
    "nctaid.x": "gridDim.x", "nctaid.y": "gridDim.y", "nctaid.z": "gridDim.z",
}

# -- constants -------------------------------------------------------------------------------


def format_float(value: float) -> str:
    """A C float literal naming exactly float32(value): `1e-06f`, `2048.0f`, `-INFINITY`."""
    with np.errstate(over="ignore"):
        v = np.float32(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    text = str(v)                      # numpy: the shortest decimal that round-trips float32
    if not any(c in text for c in ".e"):
        text += ".0"
    return text + "f"


def _format_int(value: int, wide: bool = False) -> str:
    value = int(value)
    if value == -2 ** 63:               # 9223372036854775808LL itself does not fit a long long
        return "(-9223372036854775807LL - 1)"
    if -2**31 <= value < 2**31 and not wide:
        return str(value)
    return f"{value}LL"


# -- expressions -----------------------------------------------------------------------------

# C precedence (higher binds tighter); left-associative binary operators.
_PREC = {"||": 4, "&&": 5, "|": 6, "^": 7, "&": 8, "==": 9, "!=": 9, "<": 10, "<=": 10, ">": 10,
         ">=": 10, "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13, "//": 13}
_P_TERNARY, _P_UNARY, _P_PRIMARY = 3, 15, 16
_BITWISE = {"&", "|", "^", "<<", ">>"}
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_BOOL_OPS = {"&&", "||"} | _COMPARE

# torch's maximum / minimum (so relu, clamp, amax, a softmax's row max) give NaN where
# either operand is NaN; C's fmaxf / fminf give the other operand. PTX's max.NaN / min.NaN
# (sm_80+: every target) propagate it in one instruction, as these helpers do; each is
# declared once in a translation unit that uses it (nan_minmax_decls).
NAN_MINMAX = {"max": "deplokit_fmaxf", "min": "deplokit_fminf"}


def nan_minmax_decls(text: str) -> list[str]:
    """The declarations of the NaN-propagating helpers `text` calls."""
    return [f"// {op}imum as torch computes it: NaN where either operand is NaN (f{op}f returns the other)\n"
            f"static __device__ __forceinline__ float {fn}(float a, float b) {{\n"
            f"    float r;\n    asm(\"{op}.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n"
            f"    return r;\n}}\n" for op, fn in NAN_MINMAX.items() if f"{fn}(" in text]


def tf32_decls(text: str) -> list[str]:
    """The TF32 rounding helper, where `text` calls it: to nearest even at 10 stored significand
    bits, on the bits (cvt.rna.tf32.f32 would round ties away), NaN kept (runtime/rounding.py)."""
    if "round_tf32(" not in text:
        return []
    return ["// A float32 rounded to TF32 (nearest even, 10 significand bits), as the tf32 mma operand\n"
            "static __device__ __forceinline__ float round_tf32(float x) {\n"
            "    unsigned int u = __float_as_uint(x);\n"
            "    if ((u & 0x7f800000u) == 0x7f800000u) return x;   // inf, NaN\n"
            "    u += 0xfffu + ((u >> 13) & 1u);\n"
            "    return __uint_as_float(u & 0xffffe000u);\n}\n"]


# deplokit elementwise op name -> CUDA single-precision function (unary/binary calls).
_FLOAT_FUNCS = {
    "exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf",
    "erf": "erff", "sin": "sinf", "cos": "cosf", "abs": "fabsf", "pow": "powf",
    "floor": "floorf", "ceil": "ceilf",
    "exp2": "exp2f", "log2": "log2f", "log1p": "log1pf", "expm1": "expm1f", "trunc": "truncf",
    "fmaxf": "fmaxf", "fminf": "fminf",       # C's, by their C names: the other operand for a NaN
}
_FLOAT_FUNCS["round_tf32"] = "round_tf32"       # precision="tf32": an mma operand's value (tf32_decls)
_FLOAT_FUNCS.update({c: c for c in list(_FLOAT_FUNCS.values())})
_FLOAT_FUNCS.update({"maximum": NAN_MINMAX["max"], "minimum": NAN_MINMAX["min"]})
_ARITY_2 = {"pow", "powf", "maximum", "fmaxf", "minimum", "fminf"}
# Elementwise ops that are C operators.
_INFIX_CALLS = {
    "add": "+", "subtract": "-", "multiply": "*", "divide": "/",
    "greater": ">", "less": "<", "greater_equal": ">=", "less_equal": "<=", "equal": "==",
    "not_equal": "!=", "logical_and": "&&", "logical_or": "||",
}
_CALL_ARITY = {"neg": 1, "reciprocal": 1, "sigmoid": 1, "relu": 1, "logical_not": 1, "where": 3}


def _join_types(a: str, b: str) -> str:
    if "float" in (a, b):
        return "float"
    if a == b:
        return a
    return max((a, b), key=lambda t: _INT_RANK.get(t, 1))


class _Scope:
    """Names visible at a point of the kernel: scalar -> type, arrays by kind."""

    def __init__(self, parent: "_Scope | None" = None):
        self.parent = parent
        self.names: dict[str, str] = {}

    def lookup(self, name: str) -> str | None:
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def declare(self, name: str, kind: str) -> None:
        self.names[name] = kind


class ExprRenderer:
    """The expression printer of `_Renderer` (deplokit.passes.lower.cuda_render), a mixin: it
    uses the renderer's `params`, `lane`, `warp` and `err`."""

    def type_of(self, e, scope: _Scope) -> str:
        if isinstance(e, Var):
            t = scope.lookup(e.name)
            return t if t in _VALUE_TYPES else "float"
        if isinstance(e, Const):
            return e.ctype if e.ctype in _VALUE_TYPES else "float"
        if isinstance(e, Cast):
            return e.ctype
        if isinstance(e, Special):
            return "int"
        if isinstance(e, Binary):
            if e.op in _BOOL_OPS:
                return "bool"
            if e.op in _BITWISE:
                return "int"
            return _join_types(self.type_of(e.a, scope), self.type_of(e.b, scope))
        if isinstance(e, Unary):
            return "bool" if e.op == "not" else self.type_of(e.a, scope)
        if isinstance(e, Call):
            if e.fn in ("greater", "less", "greater_equal", "less_equal", "equal", "not_equal",
                        "logical_and", "logical_or", "logical_not"):
                return "bool"
            if e.fn == "where" and len(e.args) == 3:
                return _join_types(self.type_of(e.args[1], scope), self.type_of(e.args[2], scope))
            if e.fn in ("neg", "abs", "add", "subtract", "multiply") and e.args:
                t = self.type_of(e.args[0], scope)
                for a in e.args[1:]:
                    t = _join_types(t, self.type_of(a, scope))
                return t
            return "float"
        if isinstance(e, Select):
            return _join_types(self.type_of(e.a, scope), self.type_of(e.b, scope))
        if isinstance(e, GlobalLoad):
            return e.ctype if e.ctype in _VALUE_TYPES else "float"
        if isinstance(e, Shuffle):
            return self.type_of(e.value, scope)
        if isinstance(e, SharedLoad):
            kind = scope.lookup(e.array) or ""
            return kind.split(":", 1)[1] if kind.startswith("shared:") else "float"
        if isinstance(e, RegLoad):
            kind = scope.lookup(e.array) or ""
            return kind.split(":", 1)[1] if kind.startswith("regs:") else "float"
        raise self.err(f"not a Kernel-IR expression: {e!r}")

    def expr(self, e, scope: _Scope) -> str:
        return self._expr(e, scope)[0]

    def _sub(self, e, scope: _Scope, parent_prec: int, parent_op: str | None, right: bool) -> str:
        text, prec, op = self._expr_op(e, scope)
        paren = prec < parent_prec or (right and prec == parent_prec)
        if parent_op is not None and op is not None and prec < _P_UNARY:
            # Parentheses a reader (and -Wparentheses) wants even where precedence agrees.
            if (parent_op in _BITWISE or op in _BITWISE) and op != parent_op:
                paren = True
            if parent_op in _COMPARE and op in _COMPARE:
                paren = True
            if parent_op == "||" and op == "&&":
                paren = True
        return f"({text})" if paren else text

    def _expr(self, e, scope: _Scope) -> tuple[str, int]:
        text, prec, _ = self._expr_op(e, scope)
        return text, prec

    def _binary(self, op: str, a, b, scope: _Scope) -> tuple[str, int, str]:
        prec = _PREC[op]
        left = self._sub(a, scope, prec, op, right=False)
        right = self._sub(b, scope, prec, op, right=True)
        return f"{left} {op} {right}", prec, op

    def _expr_op(self, e, scope: _Scope) -> tuple[str, int, str | None]:
        """(text, precedence, top-level C operator or None)."""
        if isinstance(e, Var):
            return e.name, _P_PRIMARY, None
        if isinstance(e, Const):
            if e.ctype == "bool" or isinstance(e.value, bool):
                return ("true" if e.value else "false"), _P_PRIMARY, None
            if e.ctype in ("int", "int64", "int32"):
                if isinstance(e.value, float) and not e.value.is_integer():
                    raise self.err(f"int constant {e.value!r} is not an integer")
                t = _format_int(int(e.value), wide=self.c_type(e.ctype) == "long long")
            elif e.ctype == "float":
                t = format_float(e.value)
            else:
                raise self.err(f"constant of unknown type {e.ctype!r}")
            return t, (_P_UNARY if t.startswith("-") else _P_PRIMARY), None
        if isinstance(e, Special):
            return self.special(e.name, bare=False)
        if isinstance(e, Cast):
            if e.ctype not in _VALUE_TYPES:
                raise self.err(f"cast to unknown type {e.ctype!r}; supported: {', '.join(_VALUE_TYPES)}")
            have = self.type_of(e.a, scope)
            if e.ctype in TO_HALF or have in FROM_HALF:
                return self._convert(self.expr(e.a, scope), have, e.ctype), _P_PRIMARY, None
            inner = self._sub(e.a, scope, _P_UNARY, None, True)
            return f"({self.c_type(e.ctype)}){inner}", _P_UNARY, None
        if isinstance(e, Binary):
            return self.binary(e, scope)
        if isinstance(e, Unary):
            if e.op == "neg":
                return self._neg(e.a, scope)
            if e.op == "not":
                return "!" + self._sub(e.a, scope, _P_UNARY, None, True), _P_UNARY, None
            raise self.err(f"unknown unary operator {e.op!r}; supported: neg, not")
        if isinstance(e, Call):
            return self.call(e, scope)
        if isinstance(e, Select):
            return self._select(e.cond, e.a, e.b, scope)
        if isinstance(e, GlobalLoad):
            p = self.param(e.buffer)
            text = f"{e.buffer}[{self.expr(e.offset, scope)}]"
            want = self.c_type(e.ctype if e.ctype in _VALUE_TYPES else "float")
            if p.ctype in FROM_HALF and want != PARAM_CTYPES[p.ctype]:    # a half element read as float
                return self._convert(text, p.ctype, "float"), _P_PRIMARY, None
            if want != PARAM_CTYPES[p.ctype]:      # an index read from an int64 tensor, say
                return f"({want}){text}", _P_UNARY, None
            return text, _P_PRIMARY, None
        if isinstance(e, SharedLoad):
            return f"{e.array}[{self.expr(e.offset, scope)}]", _P_PRIMARY, None
        if isinstance(e, RegLoad):
            return f"{e.array}[{self.expr(e.index, scope)}]", _P_PRIMARY, None
        if isinstance(e, Shuffle):
            if not (isinstance(e.lane_mask, int) and 0 < e.lane_mask < 32):
                raise self.err(f"shuffle lane mask {e.lane_mask!r} is not in 1..31")
            return (f"__shfl_xor_sync(0xffffffffu, {self.expr(e.value, scope)}, {e.lane_mask})",
                    _P_PRIMARY, None)
        raise self.err(f"not a Kernel-IR expression: {e!r}")

    def special(self, name: str, bare: bool) -> tuple[str, int, None]:
        if name == "lane":
            return self.lane, _P_PRIMARY, None
        if name == "warp":
            return self.warp, _P_PRIMARY, None
        builtin = SPECIALS[name]
        if bare:
            return builtin, _P_PRIMARY, None
        return f"({self.c_type('int')}){builtin}", _P_UNARY, None

    def _neg(self, a, scope: _Scope) -> tuple[str, int, None]:
        inner = self._sub(a, scope, _P_UNARY, None, True)
        if inner.startswith("-"):
            inner = f"({inner})"
        return "-" + inner, _P_UNARY, None

    def _select(self, c, a, b, scope: _Scope) -> tuple[str, int, None]:
        cond = self._sub(c, scope, _P_TERNARY + 1, None, False)
        ta = self._sub(a, scope, _P_TERNARY + 1, None, False)
        tb = self._sub(b, scope, _P_TERNARY + 1, None, True)
        return f"{cond} ? {ta} : {tb}", _P_TERNARY, None

    def binary(self, e: Binary, scope: _Scope) -> tuple[str, int, str | None]:
        op = e.op
        if op in ("min", "max"):
            t = self.type_of(e, scope)
            if t == "float":
                return f"{NAN_MINMAX[op]}({self.expr(e.a, scope)}, {self.expr(e.b, scope)})", _P_PRIMARY, None
            # CUDA's integer min/max overloads take two operands of one type: convert the other
            args = [self._as_c_type(x, t, scope) for x in (e.a, e.b)]
            return f"{op}({args[0]}, {args[1]})", _P_PRIMARY, None
        if op not in _PREC:
            raise self.err(f"unknown binary operator {op!r}; supported: "
                           f"{' '.join(list(_PREC) + ['min', 'max'])}")
        floating = self.type_of(e, scope) == "float"
        if op == "//":
            if floating:
                return f"floorf({self._binary('/', e.a, e.b, scope)[0]})", _P_PRIMARY, None
            return self._binary("/", e.a, e.b, scope)
        if op == "%" and floating:
            return f"fmodf({self.expr(e.a, scope)}, {self.expr(e.b, scope)})", _P_PRIMARY, None
        return self._binary(op, e.a, e.b, scope)

    def _convert(self, text: str, have: str, want: str) -> str:
        """`text` (of Kernel-IR type `have`) as `want`, where one of them is a half type."""
        if want in TO_HALF:
            if have in FROM_HALF and have != want:
                text = f"{FROM_HALF[have]}({text})"
            return text if have == want else f"{TO_HALF[want]}({text})"
        text = f"{FROM_HALF[have]}({text})"
        return text if want == "float" else f"({self.c_type(want)}){text}"

    def c_type(self, ctype: str) -> str:
        """The C spelling of a Kernel-IR scalar type in this kernel."""
        if ctype == "int" and getattr(self.k, "index_bits", 32) == 64:
            return "long long"
        return SCALAR_CTYPES[ctype]

    def _as_c_type(self, e, t: str, scope: _Scope) -> str:
        """e's text as C type t (an int64 literal with its LL suffix, other values cast)."""
        if self.c_type(self.type_of(e, scope)) == self.c_type(t):
            return self.expr(e, scope)
        if isinstance(e, Const) and self.c_type(t) == "long long":
            return _format_int(int(e.value), wide=True)
        return f"({self.c_type(t)}){self._sub(e, scope, _P_UNARY, None, True)}"

    def call(self, e: Call, scope: _Scope) -> tuple[str, int, str | None]:
        fn, args = e.fn, e.args
        want = (_CALL_ARITY.get(fn) or (2 if fn in _INFIX_CALLS or fn in _ARITY_2 else 1))
        if fn not in _CALL_ARITY and fn not in _INFIX_CALLS and fn not in _FLOAT_FUNCS:
            raise self.err(f"unknown function {fn!r}; supported: "
                           f"{', '.join(sorted(set(_FLOAT_FUNCS) | set(_INFIX_CALLS) | set(_CALL_ARITY)))}")
        if len(args) != want:
            raise self.err(f"{fn} takes {want} argument(s), got {len(args)}")
        if fn in _INFIX_CALLS:
            return self._binary(_INFIX_CALLS[fn], args[0], args[1], scope)
        if fn == "neg":
            return self._neg(args[0], scope)
        if fn == "logical_not":
            return "!" + self._sub(args[0], scope, _P_UNARY, None, True), _P_UNARY, None
        if fn == "where":
            return self._select(args[0], args[1], args[2], scope)
        if fn == "reciprocal":
            return f"1.0f / {self._sub(args[0], scope, _PREC['/'], '/', True)}", _PREC["/"], "/"
        if fn == "sigmoid":
            inner = self._neg(args[0], scope)[0]
            return f"1.0f / (1.0f + expf({inner}))", _PREC["/"], "/"
        if fn == "relu":
            return f"{NAN_MINMAX['max']}({self.expr(args[0], scope)}, 0.0f)", _P_PRIMARY, None
        if fn == "abs" and self.type_of(args[0], scope) != "float":
            return f"abs({self.expr(args[0], scope)})", _P_PRIMARY, None
        cfn = _FLOAT_FUNCS[fn]
        return f"{cfn}({', '.join(self.expr(a, scope) for a in args)})", _P_PRIMARY, None

    def param(self, name: str, write: bool = False) -> Param:
        p = self.params.get(name)
        if p is None:
            raise self.err(f"buffer {name!r} is not a parameter of the kernel; parameters: "
                           f"{', '.join(self.params) or '(none)'}")
        if write and p.const:
            raise self.err(f"stores into {name!r}, a const (read-only) parameter")
        return p

    def init_expr(self, e, scope: _Scope) -> str:
        """An expression that is the whole right-hand side: a bare thread coordinate may stay
        unsigned (it converts to int on assignment)."""
        if isinstance(e, Special):
            return self.special(e.name, bare=True)[0]
        return self.expr(e, scope)
