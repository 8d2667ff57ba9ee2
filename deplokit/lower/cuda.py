"""Kernel IR -> CUDA C++: one `extern "C"` kernel per KernelFunc, printed as a careful CUDA
engineer would write it.

    render_kernel(k, target_sm)   the text of one kernel (compiles on its own: it needs no
                                  include and no helper)
    render_program(p, target_sm)  one translation unit holding every kernel of a program

The printer is a direct mapping, statement for statement; it makes no scheduling decision
and adds no barrier (the Kernel IR says where `__syncthreads()` goes). What it owns:

* Types. Index arithmetic is `int`, values are `float`, predicates `bool`. Every Kernel-IR
  variable is a register of the thread that declares it. A buffer parameter points to
  `float`, `long long` (int64) or `int` (int32); read-only ones are `const`, and all are
  `__restrict__` (deplokit buffers never alias).
* Indices are non-negative: `//` prints as C's `/` and `%` as C's `%` on ints, which
  truncate towards zero and so agree with Python's floor division only for non-negative
  operands, which every index deplokit computes is (`/` of two ints is C's too). On floats,
  `//` is `floorf(a / b)` and `%` is `fmodf`. `min`/`max` are `min()`/`max()` on ints and
  `fminf`/`fmaxf` on floats (which, unlike numpy, return the other operand for a NaN).
* Thread coordinates. `tid.x` is `threadIdx.x`, `bid.x` is `blockIdx.x`, `bdim.x` (or
  `ntid.x`) is `blockDim.x`, `gdim.x` (or `nctaid.x`) is `gridDim.x`; these CUDA builtins
  are unsigned, so they print as `(int)threadIdx.x` inside larger expressions.
  `lane` and `warp` are the lane and warp of the flattened thread id (`threadIdx.x` for a
  1-D block), declared once at the top of the kernel when used.
* Float constants print exactly: the shortest decimal that names the same float32 (a
  kernel computes in float32), with an `f` suffix: `1e-06f`, `2048.0f`; infinities and NaN
  as CUDA's `INFINITY`, `-INFINITY`, `NAN`.
* Asynchronous copies are inline PTX, so the instruction issued is on the page:
  `cp.async.{ca,cg}.shared.global` (sm_80+; `cg`, which bypasses L1, for 16 bytes),
  `cp.async.commit_group`, `cp.async.wait_group N`; TMA bulk copies
  `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes` completing on an
  mbarrier (`mbarrier.init` / `mbarrier.arrive.expect_tx` / `mbarrier.try_wait.parity`),
  sm_90+ (plain sm_90, no `sm_90a` needed; sm_120 accepts them too). Rendering one of them
  for a target that lacks it raises ValueError.
* TMA and mbarrier semantics. Every mbarrier named by an `MbarrierInit` is a shared
  `unsigned long long`, declared at the top of the kernel. `MbarrierInit` and `TmaLoad` are
  issued by one thread: where they stand outside any `If` (every thread of the block reaches
  them) the printer guards them with `if (<flat thread id> == 0)`; inside an `If`, that
  `If`'s condition is the election and must select one thread. Each `TmaLoad` is one arrival
  (with its byte count as the transaction count), so an mbarrier expects as many arrivals
  per phase (`MbarrierInit.count`) as TmaLoads complete on it. Other threads may use an
  mbarrier only after a `Barrier` that follows its `MbarrierInit`. `MbarrierWait` is
  executed by every thread that reaches it; its phase prints as `phase & 1` (the parity).
* `AtomicAdd` prints as `atomicAdd(&buffer[offset], value);` (float atomics on global
  memory, every target): the adds land in an unspecified order.
* Output is deterministic (same tree, same bytes) with 4-space indentation.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np

from ..ir.kernel_ir import (AtomicAdd, Assign, Barrier, Binary, Call, Comment, Const, CpAsync, CpAsyncCommit,
                            CpAsyncWait, Declare, DeclareArray, For, GlobalLoad, GlobalStore, If,
                            KernelFunc, KernelProgram, MbarrierInit, MbarrierWait, Param, RegLoad,
                            Select, SharedArray, SharedLoad, SharedStore, Shuffle, Special, TmaLoad,
                            Unary, Var, VectorLoad, VectorStore)

__all__ = ["render_kernel", "render_program", "format_float"]

INDENT = "    "
STATIC_SMEM_LIMIT = 48 * 1024          # bytes of static __shared__ one block may declare
MAX_THREADS = 1024

# C element type of a buffer parameter, and of a scalar variable.
PARAM_CTYPES = {"float": "float", "float32": "float", "int64": "long long", "int32": "int",
                "int": "int", "bool": "bool"}
SCALAR_CTYPES = {"float": "float", "int": "int", "bool": "bool", "int64": "long long",
                 "int32": "int"}
# The Kernel-IR type of a value read from a buffer of each parameter ctype.
_PARAM_VALUE_TYPE = {"float": "float", "float32": "float", "int64": "int", "int32": "int",
                     "int": "int", "bool": "bool"}

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


def _format_int(value: int) -> str:
    value = int(value)
    if -2**31 <= value < 2**31:
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

# deplokit elementwise op name -> CUDA single-precision function (unary/binary calls).
_FLOAT_FUNCS = {
    "exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf",
    "erf": "erff", "sin": "sinf", "cos": "cosf", "abs": "fabsf", "pow": "powf",
    "maximum": "fmaxf", "minimum": "fminf", "floor": "floorf", "ceil": "ceilf",
    "exp2": "exp2f", "log2": "log2f", "log1p": "log1pf", "expm1": "expm1f",
}
_FLOAT_FUNCS.update({c: c for c in list(_FLOAT_FUNCS.values())})
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
    return "int"


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


def _walk(node) -> Iterator[object]:
    """Every Kernel-IR node below (and including) `node`, in a fixed order."""
    yield node
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from _walk(getattr(node, f.name))
    elif isinstance(node, tuple):
        for item in node:
            yield from _walk(item)


def _names_in(k: KernelFunc) -> set[str]:
    names = {p.name for p in k.params}
    for n in _walk(k.body):
        if isinstance(n, (Var, Declare, DeclareArray, SharedArray, MbarrierInit)):
            names.add(n.name)
        elif isinstance(n, Assign):
            names.add(n.name)
        elif isinstance(n, For):
            names.add(n.var)
        elif isinstance(n, VectorLoad):
            names.update(n.dsts)
        elif isinstance(n, (SharedLoad, RegLoad)):
            names.add(n.array)
    return names


class _Renderer:
    def __init__(self, k: KernelFunc, target_sm: int):
        self.k = k
        self.sm = target_sm
        self.params: dict[str, Param] = {}
        for p in k.params:
            if p.name in self.params:
                raise ValueError(f"kernel {k.name}: parameter {p.name!r} appears twice")
            if p.ctype not in PARAM_CTYPES:
                raise ValueError(f"kernel {k.name}: parameter {p.name!r} has element type {p.ctype!r}; "
                                 f"supported: {', '.join(sorted(PARAM_CTYPES))}")
            self.params[p.name] = p
        self.used = _names_in(k)
        self.lines: list[str] = []
        self.depth = 1
        self.smem_bytes = 0
        self.mbarriers: dict[str, str] = {}    # mbarrier name -> its shared-address variable
        self.if_depth = 0
        # Names the printer itself introduces, chosen so they never collide with the IR's.
        self.specials = {s.name for s in _walk(k.body) if isinstance(s, Special)}
        for s in sorted(self.specials):
            if s not in SPECIALS and s not in ("lane", "warp"):
                raise ValueError(f"kernel {k.name}: unknown thread coordinate {s!r}; supported: "
                                 f"{', '.join(list(SPECIALS) + ['lane', 'warp'])}")
        self.lane = self.fresh("lane") if "lane" in self.specials else None
        self.warp = self.fresh("warp") if "warp" in self.specials else None
        one_d = k.block[1] == 1 and k.block[2] == 1
        self.needs_election = any(isinstance(n, (TmaLoad, MbarrierInit)) for n in _walk(k.body))
        self.tid: str | None = None
        if one_d:
            self.flat_tid = "threadIdx.x"
        elif self.lane or self.warp or self.needs_election:
            self.tid = self.fresh("tid")
            self.flat_tid = self.tid

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}{i}" if not base[-1].isdigit() else f"{base}_{i}"
        self.used.add(name)
        return name

    def err(self, msg: str) -> ValueError:
        return ValueError(f"kernel {self.k.name} (sm_{self.sm}): {msg}")

    # -- expressions ---------------------------------------------------------------------

    def type_of(self, e, scope: _Scope) -> str:
        if isinstance(e, Var):
            t = scope.lookup(e.name)
            return t if t in ("float", "int", "bool") else "float"
        if isinstance(e, Const):
            return e.ctype if e.ctype in ("float", "int", "bool") else "float"
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
            return e.ctype if e.ctype in ("float", "int", "bool") else "float"
        if isinstance(e, Shuffle):
            return self.type_of(e.value, scope)
        if isinstance(e, (SharedLoad, RegLoad)):
            return "float"
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
            if e.ctype == "int":
                if float(e.value) != int(e.value):
                    raise self.err(f"int constant {e.value!r} is not an integer")
                t = _format_int(int(e.value))
            elif e.ctype == "float":
                t = format_float(e.value)
            else:
                raise self.err(f"constant of unknown type {e.ctype!r}")
            return t, (_P_UNARY if t.startswith("-") else _P_PRIMARY), None
        if isinstance(e, Special):
            return self.special(e.name, bare=False)
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
            have = _PARAM_VALUE_TYPE[p.ctype]
            want = e.ctype if e.ctype in ("float", "int", "bool") else "float"
            if want != have or p.ctype == "int64":
                return f"({SCALAR_CTYPES[want]}){text}", _P_UNARY, None
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
        return f"(int){builtin}", _P_UNARY, None

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
            if self.type_of(e, scope) == "float":
                fn = "fminf" if op == "min" else "fmaxf"
            else:
                fn = op
            return f"{fn}({self.expr(e.a, scope)}, {self.expr(e.b, scope)})", _P_PRIMARY, None
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
            return f"fmaxf({self.expr(args[0], scope)}, 0.0f)", _P_PRIMARY, None
        if fn == "abs" and self.type_of(args[0], scope) == "int":
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

    # -- statements ----------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text if text else "")

    def block(self, stmts, scope: _Scope) -> None:
        self.depth += 1
        inner = _Scope(scope)
        for s in stmts:
            self.stmt(s, inner)
        self.depth -= 1

    def emit_asm(self, template: list[str], inputs: list[str], outputs: list[str] = ()) -> None:
        """`asm volatile(...)` with a "memory" clobber, wrapped one operand a line when long."""
        tmpl = [f'"{t}\\n"' for t in template]
        outs, ins = ", ".join(outputs), ", ".join(inputs)
        ops = f': {outs} : {ins} : "memory"' if outputs else (f':: {ins} : "memory"' if inputs else '::: "memory"')
        one = f"asm volatile({tmpl[0]} {ops});"
        if len(template) == 1 and len(INDENT * self.depth + one) <= 100:
            self.emit(one)
            return
        pad = " " * len("asm volatile(")
        self.emit(f"asm volatile({tmpl[0]}")
        for t in tmpl[1:]:
            self.emit(pad + t)
        if len(INDENT * self.depth + pad + ops + ");") <= 100:
            self.emit(pad + ops + ");")
            return
        lead = ": " if outputs else ":: "
        if outputs:
            self.emit(pad + ": " + outs)
        for i, op in enumerate(inputs):
            sep = "," if i < len(inputs) - 1 else ""
            self.emit(pad + (lead if i == 0 else " " * len(lead)) + op + sep)
        self.emit(pad + ': "memory");')

    def shared_addr(self, ref: str) -> str:
        return f"static_cast<unsigned>(__cvta_generic_to_shared(&{ref}))"

    def guarded(self, why: str) -> bool:
        """Open `if (thread 0)` around a one-thread statement that every thread reaches."""
        if self.if_depth:
            return False
        self.emit(f"if ({self.flat_tid} == 0) {{  // {why}")
        self.depth += 1
        return True

    def close_guard(self, opened: bool) -> None:
        if opened:
            self.depth -= 1
            self.emit("}")

    def need_sm(self, sm: int, what: str) -> None:
        if self.sm < sm:
            raise self.err(f"{what} needs sm_{sm} or newer; target is sm_{self.sm}")

    def stmt(self, s, scope: _Scope) -> None:
        if isinstance(s, Declare):
            if s.ctype not in SCALAR_CTYPES:
                raise self.err(f"variable {s.name!r} has unknown type {s.ctype!r}; supported: float, int, bool")
            ctype = SCALAR_CTYPES[s.ctype]
            if s.init is None:
                self.emit(f"{ctype} {s.name};")
            else:
                self.emit(f"{ctype} {s.name} = {self.init_expr(s.init, scope)};")
            scope.declare(s.name, s.ctype if s.ctype in ("float", "int", "bool") else "int")
        elif isinstance(s, DeclareArray):
            self.declare_array(s, scope)
        elif isinstance(s, Assign):
            self.assign(s, scope)
        elif isinstance(s, SharedArray):
            if s.size <= 0:
                raise self.err(f"shared array {s.name!r} has size {s.size}")
            if s.align < 4 or s.align & (s.align - 1):
                raise self.err(f"shared array {s.name!r}: alignment {s.align} is not a power of two >= 4")
            self.smem_bytes = -(-self.smem_bytes // s.align) * s.align + 4 * s.size
            self.emit(f"__shared__ __align__({s.align}) float {s.name}[{s.size}];")
            scope.declare(s.name, "shared")
        elif isinstance(s, GlobalStore):
            self.param(s.buffer, write=True)
            self.emit(f"{s.buffer}[{self.expr(s.offset, scope)}] = {self.expr(s.value, scope)};")
        elif isinstance(s, AtomicAdd):
            p = self.param(s.buffer, write=True)
            if _PARAM_VALUE_TYPE[p.ctype] != "float":
                raise self.err(f"atomicAdd into {s.buffer!r}, a buffer of {p.ctype}")
            self.emit(f"atomicAdd(&{s.buffer}[{self.expr(s.offset, scope)}], {self.expr(s.value, scope)});")
        elif isinstance(s, SharedStore):
            self.emit(f"{s.array}[{self.expr(s.offset, scope)}] = {self.expr(s.value, scope)};")
        elif isinstance(s, VectorLoad):
            self.vector_load(s, scope)
        elif isinstance(s, VectorStore):
            self.vector_store(s, scope)
        elif isinstance(s, For):
            self.for_loop(s, scope)
        elif isinstance(s, If):
            self.if_stmt(s, scope, prefix="if")
        elif isinstance(s, Barrier):
            self.emit("__syncthreads();")
        elif isinstance(s, CpAsync):
            self.cp_async(s, scope)
        elif isinstance(s, CpAsyncCommit):
            self.need_sm(80, "cp.async.commit_group")
            self.emit_asm(["cp.async.commit_group;"], [])
        elif isinstance(s, CpAsyncWait):
            self.need_sm(80, "cp.async.wait_group")
            if not (isinstance(s.pending, int) and 0 <= s.pending <= 7):
                raise self.err(f"cp.async.wait_group {s.pending!r}: pending groups must be 0..7")
            self.emit_asm([f"cp.async.wait_group {s.pending};"], [])
        elif isinstance(s, TmaLoad):
            self.tma_load(s, scope)
        elif isinstance(s, MbarrierInit):
            self.mbarrier_init(s)
        elif isinstance(s, MbarrierWait):
            self.mbarrier_wait(s, scope)
        elif isinstance(s, Comment):
            for line in str(s.text).splitlines() or [""]:
                self.emit(f"// {line}".rstrip())
        else:
            raise self.err(f"not a Kernel-IR statement: {s!r}")

    def declare_array(self, s: DeclareArray, scope: _Scope) -> None:
        if s.size <= 0:
            raise self.err(f"register array {s.name!r} has size {s.size}")
        init = float(s.init)
        if init == 0.0 and math.copysign(1.0, init) > 0:
            self.emit(f"float {s.name}[{s.size}] = {{}};  // all 0.0f")
        elif s.size <= 8:
            values = ", ".join([format_float(init)] * s.size)
            self.emit(f"float {s.name}[{s.size}] = {{{values}}};")
        else:
            i = self.fresh("i")
            self.emit(f"float {s.name}[{s.size}];")
            self.emit("#pragma unroll")
            self.emit(f"for (int {i} = 0; {i} < {s.size}; ++{i}) {s.name}[{i}] = {format_float(init)};")
        scope.declare(s.name, "regs")

    def assign(self, s: Assign, scope: _Scope) -> None:
        target = s.name if s.index is None else f"{s.name}[{self.expr(s.index, scope)}]"
        v = s.value

        def is_target(x) -> bool:
            if s.index is None:
                return isinstance(x, Var) and x.name == s.name
            return isinstance(x, RegLoad) and x.array == s.name and x.index == s.index

        compound = {"+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"}
        if isinstance(v, Binary) and v.op in compound and not (
                v.op == "%" and self.type_of(v, scope) == "float"):
            rhs = None
            if is_target(v.a):
                rhs = v.b
            elif v.op in ("+", "*") and is_target(v.b):
                rhs = v.a                  # + and * commute exactly, in floats too
            if rhs is not None:
                self.emit(f"{target} {v.op}= {self.expr(rhs, scope)};")
                return
        self.emit(f"{target} = {self.init_expr(v, scope)};")

    def vector_load(self, s: VectorLoad, scope: _Scope) -> None:
        if len(s.dsts) != 4:
            raise self.err(f"VectorLoad needs 4 destinations, got {len(s.dsts)}")
        self._check_vec_offset(s.offset)
        off = self.expr(s.offset, scope)
        if s.space == "global":
            p = self.param(s.source)
            if _PARAM_VALUE_TYPE[p.ctype] != "float":
                raise self.err(f"float4 load from {s.source!r}, a buffer of {p.ctype}")
        elif s.space != "shared":
            raise self.err(f"VectorLoad space {s.space!r}; supported: global, shared")
        vec = self.fresh(f"{s.dsts[0]}_v4")
        self.emit(f"const float4 {vec} = *reinterpret_cast<const float4*>(&{s.source}[{off}]);")
        for dst, comp in zip(s.dsts, "xyzw"):
            if scope.lookup(dst) is None:
                self.emit(f"float {dst} = {vec}.{comp};")
                scope.declare(dst, "float")
            else:
                self.emit(f"{dst} = {vec}.{comp};")

    def vector_store(self, s: VectorStore, scope: _Scope) -> None:
        if len(s.values) != 4:
            raise self.err(f"VectorStore needs 4 values, got {len(s.values)}")
        self._check_vec_offset(s.offset)
        if s.space == "global":
            p = self.param(s.target, write=True)
            if _PARAM_VALUE_TYPE[p.ctype] != "float":
                raise self.err(f"float4 store into {s.target!r}, a buffer of {p.ctype}")
        elif s.space != "shared":
            raise self.err(f"VectorStore space {s.space!r}; supported: global, shared")
        values = ", ".join(self.expr(v, scope) for v in s.values)
        lhs = f"*reinterpret_cast<float4*>(&{s.target}[{self.expr(s.offset, scope)}]) ="
        rhs = f"make_float4({values});"
        if len(INDENT * self.depth + lhs + rhs) < 100:
            self.emit(f"{lhs} {rhs}")
        else:
            self.emit(lhs)
            self.emit(INDENT + rhs)

    def _check_vec_offset(self, offset) -> None:
        if isinstance(offset, Const) and int(offset.value) % 4:
            raise self.err(f"float4 access at element offset {offset.value}: not 16-byte aligned")

    def for_loop(self, s: For, scope: _Scope) -> None:
        inner = _Scope(scope)
        inner.declare(s.var, "int")
        start = self.init_expr(s.start, scope)
        stop = self.expr(s.stop, inner)
        if isinstance(s.step, Const) and s.step.value == 1:
            step = f"++{s.var}"
        elif isinstance(s.step, Const) and s.step.value == -1:
            step = f"--{s.var}"
        else:
            step = f"{s.var} += {self.expr(s.step, inner)}"
        cmp = ">" if isinstance(s.step, Const) and s.step.value < 0 else "<"
        if s.unroll:
            self.emit("#pragma unroll")
        self.emit(f"for (int {s.var} = {start}; {s.var} {cmp} {stop}; {step}) {{")
        self.depth += 1
        for st in s.body:
            self.stmt(st, inner)
        self.depth -= 1
        self.emit("}")

    def if_stmt(self, s: If, scope: _Scope, prefix: str) -> None:
        line = f"{prefix} ({self.expr(s.cond, scope)}) {{"
        if prefix == "if":
            self.emit(line)
        else:
            self.lines[-1] = self.lines[-1] + " " + line    # "} else if (...) {"
        self.if_depth += 1
        self.block(s.then, scope)
        if len(s.orelse) == 1 and isinstance(s.orelse[0], If):
            self.emit("}")
            self.if_stmt(s.orelse[0], scope, prefix="else if")
            self.if_depth -= 1
            return
        if s.orelse:
            self.emit("} else {")
            self.block(s.orelse, scope)
        self.if_depth -= 1
        self.emit("}")

    def cp_async(self, s: CpAsync, scope: _Scope) -> None:
        self.need_sm(80, "cp.async")
        if s.nbytes not in (4, 8, 16):
            raise self.err(f"cp.async of {s.nbytes} bytes; supported: 4, 8, 16")
        p = self.param(s.buffer)
        if _PARAM_VALUE_TYPE[p.ctype] != "float":
            raise self.err(f"cp.async from {s.buffer!r}, a buffer of {p.ctype}")
        kind = "cg" if s.nbytes == 16 else "ca"       # cg: through L2 only, 16 bytes
        dst = self.shared_addr(f"{s.array}[{self.expr(s.dst_offset, scope)}]")
        src = f"&{s.buffer}[{self.expr(s.src_offset, scope)}]"
        self.emit_asm([f"cp.async.{kind}.shared.global [%0], [%1], {s.nbytes};"],
                      [f'"r"({dst})', f'"l"({src})'])

    def mbarrier(self, name: str) -> str:
        if name not in self.mbarriers:
            raise self.err(f"mbarrier {name!r} is used but no MbarrierInit declares it")
        return self.mbarriers[name]

    def tma_load(self, s: TmaLoad, scope: _Scope) -> None:
        self.need_sm(90, "TMA (cp.async.bulk)")
        nbytes = 4 * s.count
        if s.count <= 0 or nbytes % 16:
            raise self.err(f"TMA bulk copy of {s.count} floats ({nbytes} bytes): the size must be a "
                           f"positive multiple of 16 bytes")
        p = self.param(s.buffer)
        if _PARAM_VALUE_TYPE[p.ctype] != "float":
            raise self.err(f"TMA copy from {s.buffer!r}, a buffer of {p.ctype}")
        bar = self.mbarrier(s.barrier)
        dst = self.shared_addr(f"{s.array}[{self.expr(s.dst_offset, scope)}]")
        src = f"&{s.buffer}[{self.expr(s.src_offset, scope)}]"
        opened = self.guarded(f"one thread issues the bulk copy")
        self.emit(f"// {s.barrier} expects {nbytes} more bytes this phase; the copy completes them")
        self.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                      [f'"r"({bar})', f'"r"({nbytes})'])
        self.emit_asm(["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"],
                      [f'"r"({dst})', f'"l"({src})', f'"r"({nbytes})', f'"r"({bar})'])
        self.close_guard(opened)

    def mbarrier_init(self, s: MbarrierInit) -> None:
        self.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
        if not (isinstance(s.count, int) and s.count >= 1):
            raise self.err(f"mbarrier {s.name!r}: arrival count {s.count!r} must be >= 1")
        bar = self.mbarrier(s.name)
        opened = self.guarded(f"one thread initialises the mbarrier")
        self.emit_asm(["mbarrier.init.shared.b64 [%0], %1;"], [f'"r"({bar})', f'"r"({s.count})'])
        self.emit("// make the initialised mbarrier visible to the async proxy (the TMA unit)")
        self.emit_asm(["fence.proxy.async.shared::cta;"], [])
        self.close_guard(opened)

    def mbarrier_wait(self, s: MbarrierWait, scope: _Scope) -> None:
        self.need_sm(90, "mbarrier.try_wait")
        bar = self.mbarrier(s.name)
        if isinstance(s.phase, Const):
            parity = str(int(s.phase.value) & 1)
        else:
            parity = f"{self._sub(s.phase, scope, _PREC['&'], '&', False)} & 1"
        ready = self.fresh("ready")
        self.emit(f"{{  // wait until mbarrier {s.name} completes the phase of parity {parity}")
        self.depth += 1
        self.emit(f"unsigned {ready} = 0;")
        self.emit("do {")
        self.depth += 1
        self.emit_asm(["{", "    .reg .pred p;", "    mbarrier.try_wait.parity.shared.b64 p, [%1], %2;",
                       "    selp.u32 %0, 1, 0, p;", "}"],
                      [f'"r"({bar})', f'"r"({parity})'], [f'"=r"({ready})'])
        self.depth -= 1
        self.emit(f"}} while (!{ready});")
        self.depth -= 1
        self.emit("}")

    # -- the kernel ----------------------------------------------------------------------

    def render(self) -> str:
        k = self.k
        if len(k.block) != 3 or len(k.grid) != 3 or min(k.block) < 1 or min(k.grid) < 1:
            raise self.err(f"grid {k.grid} and block {k.block} must be three positive extents")
        if k.threads > MAX_THREADS:
            raise self.err(f"{k.threads} threads per block; CUDA allows at most {MAX_THREADS}")
        nodes = list(_walk(k.body))
        if any(isinstance(n, TmaLoad) for n in nodes):
            self.need_sm(90, "TMA (cp.async.bulk)")
        if any(isinstance(n, (CpAsync, CpAsyncCommit, CpAsyncWait)) for n in nodes):
            self.need_sm(80, "cp.async")
        scope = _Scope()
        params = []
        for p in k.params:
            const = "const " if p.const else ""
            params.append(f"{const}{PARAM_CTYPES[p.ctype]}* __restrict__ {p.name}")
            scope.declare(p.name, "param")
        # Preamble: the thread coordinates the printer introduces, then the mbarriers.
        bx, by, bz = k.block
        if self.tid:
            flat = "threadIdx.x"
            if bz > 1:
                flat += f" + {bx} * (threadIdx.y + {by} * threadIdx.z)"
            else:
                flat += f" + {bx} * threadIdx.y"
            self.emit(f"const int {self.tid} = {flat};  // flattened thread id")
        if self.lane:
            self.emit(f"const int {self.lane} = {self.flat_tid} & 31;")
        if self.warp:
            self.emit(f"const int {self.warp} = {self.flat_tid} >> 5;")
        inits = []
        for n in _walk(k.body):
            if isinstance(n, MbarrierInit) and n.name not in self.mbarriers:
                self.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
                addr = self.fresh(f"{n.name}_addr")
                self.mbarriers[n.name] = addr
                inits.append(n.name)
        self.smem_bytes = 8 * len(inits)          # declared first, before any float array
        for name in inits:
            self.emit(f"__shared__ __align__(8) unsigned long long {name};  // mbarrier")
            self.emit(f"const unsigned {self.mbarriers[name]} = {self.shared_addr(name)};")
            scope.declare(name, "mbarrier")
        body_scope = _Scope(scope)
        for s in k.body:
            self.stmt(s, body_scope)
        smem = self.smem_bytes
        if smem > STATIC_SMEM_LIMIT:
            raise self.err(f"{smem} bytes of static shared memory; a block may declare at most "
                           f"{STATIC_SMEM_LIMIT} statically")
        head = [
            f"// {k.name}: grid ({', '.join(map(str, k.grid))}), block ({', '.join(map(str, k.block))})",
            f'extern "C" __global__ __launch_bounds__({k.threads}) void {k.name}({", ".join(params)}) {{',
        ]
        return "\n".join(head + self.lines + ["}"]) + "\n"


def _target_sm(target_sm) -> int:
    sm = getattr(target_sm, "sm", target_sm)
    if isinstance(sm, str) and sm.startswith("sm_") and sm[3:].rstrip("a").isdigit():
        sm = int(sm[3:].rstrip("a"))
    if not isinstance(sm, int) or isinstance(sm, bool) or sm < 50:
        raise ValueError(f"target_sm must be an SM number such as 80, 90 or 120, got {target_sm!r}")
    return sm


def render_kernel(k: KernelFunc, target_sm: int) -> str:
    """The CUDA text of one kernel for `target_sm` (80, 90, 120, or a Target / "sm_90").

    Raises ValueError for a tree the target cannot run (TMA below sm_90, cp.async below
    sm_80), an unknown operator, function or buffer, or too much static shared memory."""
    return _Renderer(k, _target_sm(target_sm)).render()


def render_program(p: KernelProgram, target_sm: int) -> str:
    """One translation unit holding every kernel of `p`, in launch order."""
    sm = _target_sm(target_sm)
    names = [k.name for k in p.kernels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"kernel names must be unique in a program; repeated: {', '.join(dupes)}")
    header = [
        f"// Generated by deplokit from Kernel IR for sm_{sm}: "
        f"{len(p.kernels)} kernel{'s' if len(p.kernels) != 1 else ''}, launched in this order.",
        "// Indices are non-negative ints, so C's truncating / and % are floor division and modulo.",
        f"// Build: nvcc -cubin -arch=sm_{sm} -O3 <this file>",
    ]
    if p.outputs:
        header.append(f"// Program outputs: {', '.join(p.outputs)}")
    parts = ["\n".join(header) + "\n"]
    parts += [render_kernel(k, sm) for k in p.kernels]
    return "\n".join(parts)
