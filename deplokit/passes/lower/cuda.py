"""Kernel IR -> CUDA C++: one `extern "C"` kernel per KernelFunc, printed as a careful CUDA
engineer would write it.

    render_kernel(k, target_sm)   the text of one kernel (compiles on its own: it needs no
                                  include and no helper)
    render_program(p, target_sm)  one translation unit holding every kernel of a program
    render_cuda(program, ctx)     that translation unit as a CudaSource, for the pipeline's
                                  target (`ctx.target`)
    format_float(value)           the exact C literal of a float32 constant

The printer is a direct mapping, statement for statement; it makes no scheduling decision
and adds no barrier (the Kernel IR says where `__syncthreads()` goes). What it owns:

* Types. Index arithmetic is `int`, values are `float`, predicates `bool`. Every Kernel-IR
  variable is a register of the thread that declares it. A buffer parameter points to
  `float`, `long long` (int64) or `int` (int32); read-only ones are `const`, and all are
  `__restrict__` (deplokit buffers never alias).
* Indices are non-negative: `//` prints as C's `/` and `%` as C's `%` on ints, which
  truncate towards zero and so agree with Python's floor division only for non-negative
  operands, which every index deplokit computes is (`/` of two ints is C's too). On floats,
  `//` is `floorf(a / b)` and `%` is `fmodf`. `min`/`max` are `min()`/`max()` on ints and, on
  floats, `deplokit_fminf`/`deplokit_fmaxf` (PTX `min.NaN`/`max.NaN`, declared once where
  used): NaN where either operand is NaN, as torch's maximum, amax, relu and clamp give,
  where C's `fminf`/`fmaxf` would return the other operand.
* Thread coordinates. `tid.x` is `threadIdx.x`, `bid.x` is `blockIdx.x`, `bdim.x` (or
  `ntid.x`) is `blockDim.x`, `gdim.x` (or `nctaid.x`) is `gridDim.x`; these CUDA builtins
  are unsigned, so they print as `(int)threadIdx.x` inside larger expressions.
  `lane` and `warp` are the lane and warp of the flattened thread id (`threadIdx.x` for a
  1-D block), declared once at the top of the kernel when used.
* Float constants print exactly: the shortest decimal that names the same float32 (a
  kernel computes in float32), with an `f` suffix: `1e-06f`, `2048.0f`; infinities and NaN
  as CUDA's `INFINITY`, `-INFINITY`, `NAN`.
* The advanced features' statements are printed by their own modules through
  FEATURE_STATEMENTS, as inline PTX, so the instruction issued is on the page: cp.async
  copies by passes/lower/cuda_cp_async.py, TMA copies and mbarriers by
  passes/tma/cuda_tma.py, the tensor cores' ldmatrix and mma.sync by passes/mma/cuda_mma.py
  (wgmma by passes/wgmma/cuda_wgmma.py), the split-K tail's fence, counter and broadcast by
  passes/split/cuda_split.py. The renderer gives them `emit_asm` and `shared_addr`.
* Output is deterministic (same tree, same bytes) with 4-space indentation.

One module, one job, in reading order: the C types, literals, operator precedence and
function tables; the feature table; the `_Renderer` (its statements, then its
expressions, then what the features' inline PTX uses); the kernel and program entries.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ...display import Displayable
from ...ir.kernel_ir import (
    Assign,
    Barrier,
    Binary,
    Call,
    Cast,
    Comment,
    Const,
    Declare,
    DeclareArray,
    For,
    GlobalLoad,
    GlobalStore,
    If,
    KernelFunc,
    KernelProgram,
    Param,
    RegLoad,
    Select,
    SharedArray,
    SharedLoad,
    SharedStore,
    Shuffle,
    Special,
    SyncWarp,
    Unary,
    Var,
    VectorLoad,
    VectorStore,
    declared_locals,
)
from ...ir.kernel_wgmma import uses_wgmma
from ...ir.names import fresh_name
from ...ir.ops import OPS, is_c_operator
from ...ir.types import ctype_bytes
from ...target import STATIC_SMEM_PER_BLOCK, WARP_SIZE
from ..mma import cuda_mma
from ..record import Pass
from ..split import cuda_split
from ..tma import cuda_tma
from ..wgmma import cuda_wgmma
from . import cuda_cp_async

__all__ = ["CudaSource", "render_cuda", "render_kernel", "render_program", "format_float"]


INDENT = "    "

# C element type of a buffer parameter, and of a scalar variable ("int", the type of index
# arithmetic, is `long long` in a kernel stamped index_bits=64: _Renderer.c_type).
PARAM_CTYPES = {"float": "float", "float32": "float", "int64": "long long", "int32": "int",
                "int": "int", "bool": "bool", "bf16": "__nv_bfloat16", "f16": "__half"}
SCALAR_CTYPES = {"float": "float", "int": "int", "bool": "bool", "int64": "long long",
                 "int32": "int", "bf16": "__nv_bfloat16", "f16": "__half",
                 "b32": "unsigned"}       # a tensor-core register of two packed halves
# The Kernel-IR type of a value read from a buffer of each parameter ctype.
_PARAM_VALUE_TYPE = {"float": "float", "float32": "float", "int64": "int64", "int32": "int32",
                     "int": "int32", "bool": "bool", "bf16": "bf16", "f16": "f16"}
_VALUE_TYPES = ("float", "int", "int64", "int32", "bool", "bf16", "f16")
# Half <-> float, always through the intrinsics (cuda_bf16.h, cuda_fp16.h): round to nearest
# even one way, exact the other; never C's implicit conversion operators (docs/precision.md).
TO_HALF = {"bf16": "__float2bfloat16_rn", "f16": "__float2half_rn"}
FROM_HALF = {"bf16": "__bfloat162float", "f16": "__half2float"}
FROM_BITS = {"bf16": "__ushort_as_bfloat16", "f16": "__ushort_as_half"}      # 4 halves move as a ushort4
TO_BITS = {"bf16": "__bfloat16_as_ushort", "f16": "__half_as_ushort"}
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


def tf32_decls(text: str) -> list[str]:
    """The TF32 rounding helper, where `text` calls it: to nearest even at 10 stored significand
    bits, on the bits (cvt.rna.tf32.f32 would round ties away), inf and NaN kept
    (runtime/rounding.py rounds the same way)."""
    if "round_tf32(" not in text:
        return []
    return ["// A float32 rounded to TF32 (nearest even, 10 significand bits), as the tf32 mma operand\n"
            "static __device__ __forceinline__ float round_tf32(float x) {\n"
            "    unsigned int u = __float_as_uint(x);\n"
            "    if ((u & 0x7f800000u) == 0x7f800000u) return x;   // inf, NaN\n"
            "    u += 0xfffu + ((u >> 13) & 1u);\n"
            "    return __uint_as_float(u & 0xffffe000u);\n}\n"]


def half_headers(text: str) -> list[str]:
    """The CUDA headers declaring the half types `text` uses."""
    return [h for t, h in HALF_HEADERS.items() if re.search(rf"\b{t}\b", text)]


def nan_minmax_decls(text: str) -> list[str]:
    """The declarations of the NaN-propagating helpers `text` calls."""
    return [f"// {op}imum as torch computes it: NaN where either operand is NaN (f{op}f returns the other)\n"
            f"static __device__ __forceinline__ float {fn}(float a, float b) {{\n"
            f"    float r;\n    asm(\"{op}.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n"
            f"    return r;\n}}\n" for op, fn in NAN_MINMAX.items() if f"{fn}(" in text]


# deplokit elementwise op name -> CUDA single-precision function (unary/binary calls): the
# primitives' (ir/ops.py), and the C functions Kernel IR calls by their own names
_FLOAT_FUNCS = {name: op.cuda for name, op in OPS.items() if op.cuda and not is_c_operator(op.cuda)} | {
    "fmaxf": "fmaxf", "fminf": "fminf",       # C's, by their C names: the other operand for a NaN
}
_FLOAT_FUNCS["round_tf32"] = "round_tf32"       # precision="tf32": an mma operand's value (tf32_decls)
_FLOAT_FUNCS.update({c: c for c in list(_FLOAT_FUNCS.values())})
_FLOAT_FUNCS.update({"maximum": NAN_MINMAX["max"], "minimum": NAN_MINMAX["min"]})
# the two-operand functions (powf, atan2f, hypotf), by either name
_ARITY_2 = {"maximum", "fmaxf", "minimum", "fminf"} | {
    n for name, op in OPS.items() if op.arity == 2 and name in _FLOAT_FUNCS for n in (name, op.cuda) if n}
# Elementwise ops that are C operators (ir/ops.py).
_INFIX_CALLS = {name: op.cuda for name, op in OPS.items() if is_c_operator(op.cuda)}
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


MAX_THREADS = 1024

# The advanced features' statements, printed by plain functions of their own modules that
# take the renderer as their first argument: the core's statements stay methods of
# _Renderer, each feature's live beside it, and each feature module's STATEMENTS table says
# which function prints which of its statements. (Tables, not mixins: a reader of a feature
# module sees every renderer name it uses spelled `r.x`, and the renderer names no feature
# but here and at TMA's hooks: cuda_tma's check_target, needs_election, tensor_map_params,
# declare_mbarriers, declare_tma_destination, elected_cond and its two declarations.)
FEATURE_STATEMENTS = {**cuda_cp_async.STATEMENTS, **cuda_tma.STATEMENTS, **cuda_mma.STATEMENTS,
                      **cuda_wgmma.STATEMENTS, **cuda_split.STATEMENTS}


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
    """The names the printer's own names must not meet: the parameters and every local."""
    return {p.name for p in k.params} | {t.name for t in k.tensor_maps} | set(declared_locals(k))


class _Renderer:
    """Prints one KernelFunc for one target: its statements, its expressions and its inline PTX."""

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
        self.needs_election = cuda_tma.needs_election(_walk(k.body))
        self.tma_arrays: dict[str, str] | None = None    # cuda_tma.tma_destinations fills it
        self.tid: str | None = None
        self.dynamic_smem = self.fresh("dyn_smem") if k.dynamic_smem else None
        if one_d:
            self.flat_tid = "threadIdx.x"
        elif self.lane or self.warp or self.needs_election:
            self.tid = self.fresh("tid")
            self.flat_tid = self.tid

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.used, "_" if base[-1].isdigit() else "")
        self.used.add(name)
        return name

    def err(self, msg: str) -> ValueError:
        return ValueError(f"kernel {self.k.name} (sm_{self.sm}): {msg}")

    # -- statements ----------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text if text else "")

    def block(self, stmts, scope: _Scope) -> None:
        self.depth += 1
        inner = _Scope(scope)
        for s in stmts:
            self.stmt(s, inner)
        self.depth -= 1

    def stmt(self, s, scope: _Scope) -> None:
        if isinstance(s, Declare):
            if s.ctype not in SCALAR_CTYPES:
                raise self.err(f"variable {s.name!r} has unknown type {s.ctype!r}; supported: "
                               f"{', '.join(SCALAR_CTYPES)}")
            ctype = self.c_type(s.ctype)
            if s.init is None:
                self.emit(f"{ctype} {s.name};")
            else:
                self.emit(f"{ctype} {s.name} = {self.init_expr(s.init, scope)};")
            scope.declare(s.name, s.ctype)
        elif isinstance(s, DeclareArray):
            self.declare_array(s, scope)
        elif isinstance(s, Assign):
            self.assign(s, scope)
        elif isinstance(s, SharedArray):
            if s.size <= 0:
                raise self.err(f"shared array {s.name!r} has size {s.size}")
            if s.align < 4 or s.align & (s.align - 1):
                raise self.err(f"shared array {s.name!r}: alignment {s.align} is not a power of two >= 4")
            if s.ctype not in SCALAR_CTYPES:
                raise self.err(f"shared array {s.name!r} has unknown element type {s.ctype!r}")
            if s.offset is not None:
                self.dynamic_array(s)
            else:
                self.smem_bytes = -(-self.smem_bytes // s.align) * s.align + ctype_bytes(s.ctype) * s.size
                self.emit(f"__shared__ __align__({s.align}) {self.c_type(s.ctype)} {s.name}[{s.size}];")
            scope.declare(s.name, f"shared:{s.ctype}")
            cuda_tma.declare_tma_destination(self, s)
        elif isinstance(s, GlobalStore):
            self.param(s.buffer, write=True)
            self.emit(f"{s.buffer}[{self.expr(s.offset, scope)}] = {self.expr(s.value, scope)};")
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
        elif isinstance(s, (Barrier, SyncWarp)):
            self.emit("__syncthreads();" if isinstance(s, Barrier) else "__syncwarp();")
        elif isinstance(s, Comment):
            for line in str(s.text).splitlines() or [""]:
                self.emit(f"// {line}".rstrip())
        elif type(s) in FEATURE_STATEMENTS:
            FEATURE_STATEMENTS[type(s)](self, s, scope)
        else:
            raise self.err(f"not a Kernel-IR statement: {s!r}")

    def declare_array(self, s: DeclareArray, scope: _Scope) -> None:
        if s.size <= 0:
            raise self.err(f"register array {s.name!r} has size {s.size}")
        if s.ctype not in SCALAR_CTYPES:
            raise self.err(f"register array {s.name!r} has unknown element type {s.ctype!r}")
        ctype = self.c_type(s.ctype)
        floating = s.ctype == "float"
        init = float(s.init) if floating else int(s.init)
        literal = format_float(init) if floating else _format_int(init)
        if init == 0 and (not floating or math.copysign(1.0, init) > 0):
            self.emit(f"{ctype} {s.name}[{s.size}] = {{}};  // all {literal}")
        elif s.size <= 8:
            values = ", ".join([literal] * s.size)
            self.emit(f"{ctype} {s.name}[{s.size}] = {{{values}}};")
        else:
            i = self.fresh("i")
            self.emit(f"{ctype} {s.name}[{s.size}];")
            self.emit("#pragma unroll")
            self.emit(f"for (int {i} = 0; {i} < {s.size}; ++{i}) {s.name}[{i}] = {literal};")
        scope.declare(s.name, f"regs:{s.ctype}")

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
        half = None
        if s.space == "global":
            p = self.param(s.source)
            half = p.ctype if p.ctype in FROM_HALF else None
            if _PARAM_VALUE_TYPE[p.ctype] != "float" and half is None:
                raise self.err(f"float4 load from {s.source!r}, a buffer of {p.ctype}")
        elif s.space != "shared":
            raise self.err(f"VectorLoad space {s.space!r}; supported: global, shared")
        vec = self.fresh(f"{s.dsts[0]}_v4")
        if half:       # 4 halves: one 8-byte load (ushort4), each widened to float
            self.emit(f"const ushort4 {vec} = *reinterpret_cast<const ushort4*>(&{s.source}[{off}]);")
        else:
            self.emit(f"const float4 {vec} = *reinterpret_cast<const float4*>(&{s.source}[{off}]);")
        for dst, comp in zip(s.dsts, "xyzw"):
            value = f"{vec}.{comp}" if half is None else f"{FROM_HALF[half]}({FROM_BITS[half]}({vec}.{comp}))"
            if scope.lookup(dst) is None:
                self.emit(f"float {dst} = {value};")
                scope.declare(dst, "float")
            else:
                self.emit(f"{dst} = {value};")

    def vector_store(self, s: VectorStore, scope: _Scope) -> None:
        if len(s.values) != 4:
            raise self.err(f"VectorStore needs 4 values, got {len(s.values)}")
        self._check_vec_offset(s.offset)
        half = None
        if s.space == "global":
            p = self.param(s.target, write=True)
            half = p.ctype if p.ctype in TO_BITS else None
            if _PARAM_VALUE_TYPE[p.ctype] != "float" and half is None:
                raise self.err(f"float4 store into {s.target!r}, a buffer of {p.ctype}")
        elif s.space != "shared":
            raise self.err(f"VectorStore space {s.space!r}; supported: global, shared")
        if half:       # 4 halves: one 8-byte store (ushort4) of their bits
            texts = []
            for v in s.values:
                have, text = self.type_of(v, scope), self.expr(v, scope)
                texts.append(f"{TO_BITS[half]}({text if have == half else self._convert(text, have, half)})")
            values = ", ".join(texts)
            lhs = f"*reinterpret_cast<ushort4*>(&{s.target}[{self.expr(s.offset, scope)}]) ="
            rhs = f"make_ushort4({values});"
        else:
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
        cmp = ">" if isinstance(s.step, Const) and s.step.value < 0 else "<"
        stop = self._sub(s.stop, inner, _PREC[cmp], cmp, True)    # a runtime bound may be a ?: (min)
        if isinstance(s.step, Const) and s.step.value == 1:
            step = f"++{s.var}"
        elif isinstance(s.step, Const) and s.step.value == -1:
            step = f"--{s.var}"
        else:
            step = f"{s.var} += {self.expr(s.step, inner)}"
        cmp = ">" if isinstance(s.step, Const) and s.step.value < 0 else "<"
        if s.unroll or s.rolled:
            self.emit("#pragma unroll" if s.unroll else "#pragma unroll 1")
        self.emit(f"for ({self.c_type('int')} {s.var} = {start}; {s.var} {cmp} {stop}; {step}) {{")
        self.depth += 1
        for st in s.body:
            self.stmt(st, inner)
        self.depth -= 1
        self.emit("}")

    def if_stmt(self, s: If, scope: _Scope, prefix: str) -> None:
        line = f"{prefix} ({cuda_tma.elected_cond(self, s, scope) if s.elect else self.expr(s.cond, scope)}) {{"
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

    # -- the kernel ----------------------------------------------------------------------

    def render(self) -> str:
        k = self.k
        if len(k.block) != 3 or len(k.grid) != 3 or min(k.block) < 1 or min(k.grid) < 1:
            raise self.err(f"grid {k.grid} and block {k.block} must be three positive extents")
        if k.threads > MAX_THREADS:
            raise self.err(f"{k.threads} threads per block; CUDA allows at most {MAX_THREADS}")
        nodes = list(_walk(k.body))
        cuda_tma.check_target(self, nodes)
        cuda_cp_async.check_target(self, nodes)
        scope = _Scope()
        params = []
        for p in k.params:
            const = "const " if p.const else ""
            params.append(f"{const}{PARAM_CTYPES[p.ctype]}* __restrict__ {p.name}")
            scope.declare(p.name, "param")
        params += cuda_tma.tensor_map_params(self, scope)
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
        cuda_tma.declare_mbarriers(self, scope)
        if self.dynamic_smem:
            self.emit(f"extern __shared__ __align__(1024) unsigned char {self.dynamic_smem}[];  "
                      f"// {k.dynamic_smem} bytes at launch")
        body_scope = _Scope(scope)
        for s in k.body:
            self.stmt(s, body_scope)
        smem = self.smem_bytes
        if smem > STATIC_SMEM_PER_BLOCK:
            raise self.err(f"{smem} bytes of static shared memory; a block may declare at most "
                           f"{STATIC_SMEM_PER_BLOCK} statically")
        # the bound in whole warps (what the block occupies anyway): ptxas reads a bound such
        # as 104 as a tight register budget and spills (issue 14: matmul_odd, 104 threads)
        bound = -(-k.threads // WARP_SIZE) * WARP_SIZE
        if k.min_blocks:
            bound = f"{bound}, {k.min_blocks}"
        head = [
            f"// {k.name}: grid ({', '.join(map(str, k.grid))}), block ({', '.join(map(str, k.block))})",
            f'extern "C" __global__ __launch_bounds__({bound}) void {k.name}({", ".join(params)}) {{',
        ]
        return "\n".join(head + self.lines + ["}"]) + "\n"

    # -- expressions -----------------------------------------------------------------------

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
        if isinstance(e, Shuffle) and e.width:
            if not (isinstance(e.lane_mask, int) and 0 <= e.lane_mask < e.width <= 32):
                raise self.err(f"shuffle source lane {e.lane_mask!r} is not in 0..{e.width - 1} (width {e.width})")
            return (f"__shfl_sync(0xffffffffu, {self.expr(e.value, scope)}, {e.lane_mask}, {e.width})",
                    _P_PRIMARY, None)
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

    def operand(self, e, scope: _Scope, op: str) -> str:
        """e printed as the left operand of the binary C operator `op` (in parentheses where
        C's precedence needs them)."""
        return self._sub(e, scope, _PREC[op], op, False)

    def float_param(self, name: str, what: str, halves: bool = False) -> Param:
        """Buffer parameter `name`, which `what` copies as float words (halves=True: or as the
        bytes of half elements)."""
        p = self.param(name)
        if _PARAM_VALUE_TYPE[p.ctype] not in (("float", "bf16", "f16") if halves else ("float",)):
            raise self.err(f"{what} from {name!r}, a buffer of {p.ctype}")
        return p

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

    # -- inline PTX, for the features' statements (cuda_cp_async.py, passes/tma, mma, wgmma) ---

    def emit_asm(self, template: list[str], inputs: list[str], outputs: list[str] = (), volatile=True) -> None:
        """`asm volatile(...)` with a "memory" clobber, wrapped one operand a line when long
        (volatile=False: a plain asm computing its outputs, no clobber)."""
        tmpl = [f'"{t}\\n"' for t in template]
        outs, ins = ", ".join(outputs), ", ".join(inputs)
        if not volatile:
            self.emit(f"asm({tmpl[0]} : {outs} : {ins});")
            return
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

    def need_sm(self, sm: int, what: str) -> None:
        if self.sm < sm:
            raise self.err(f"{what} needs sm_{sm} or newer; target is sm_{self.sm}")

    def dynamic_array(self, s: SharedArray) -> None:
        """A shared array carved from the kernel's dynamic shared memory at its fixed offset."""
        nbytes, ctype = ctype_bytes(s.ctype) * s.size, self.c_type(s.ctype)
        if s.offset < 0 or s.offset % s.align or s.offset + nbytes > self.k.dynamic_smem:
            raise self.err(f"shared array {s.name!r} at dynamic offset {s.offset} ({nbytes} bytes, "
                           f"alignment {s.align}) is outside the kernel's {self.k.dynamic_smem} bytes of "
                           f"dynamic shared memory or misaligned")
        self.emit(f"{ctype}* const {s.name} = reinterpret_cast<{ctype}*>({self.dynamic_smem} + {s.offset});"
                  f"  // {nbytes} bytes")


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
    sm_80), an unknown operator, function or buffer, or too much static shared memory.
    Standalone: the min / max helpers it calls are declared before it."""
    text = _Renderer(k, _target_sm(target_sm)).render()
    return "\n".join(half_headers(text) + nan_minmax_decls(text) + tf32_decls(text) + [text])


def render_program(p: KernelProgram, target_sm: int) -> str:
    """One translation unit holding every kernel of `p`, in launch order."""
    sm = _target_sm(target_sm)
    names = [k.name for k in p.kernels]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"kernel names must be unique in a program; repeated: {', '.join(dupes)}")
    header = [
        f"// Generated by deplokit from Kernel IR for sm_{sm}: "
        f"{len(p.kernels)} kernel{'s' if len(p.kernels) != 1 else ''}, launched in this order.",
        "// Indices are non-negative ints, so C's truncating / and % are floor division and modulo;",
        "// integer values are computed exactly at their width (long long, int), casts explicit.",
        f"// Build: nvcc -cubin -arch=sm_{sm}{'a' if any(uses_wgmma(k) for k in p.kernels) else ''} -O3 <this file>",
    ]
    if p.outputs:
        header.append(f"// Program outputs: {', '.join(p.outputs)}")
    parts = ["\n".join(header) + "\n"] + ([cuda_tma.TENSOR_MAP_DECL] if any(k.tensor_maps for k in p.kernels) else [])
    parts += [cuda_tma.ELECT_DECL] if any(cuda_tma.elects(k, sm) for k in p.kernels) else []
    kernels = [_Renderer(k, sm).render() for k in p.kernels]      # the min / max helpers declared once
    text = "".join(kernels)
    if headers := half_headers(text):      # after the comment block, before any declaration
        parts[0] += "".join(h + "\n" for h in headers)
    return "\n".join(parts + nan_minmax_decls(text) + tf32_decls(text) + kernels)


@dataclass(frozen=True)
class CudaSource(Displayable):
    text: str
    target: str                    # sm_80 | sm_90 | sm_120
    kernels: tuple[str, ...]
    # a kernel issues wgmma (kernel_wgmma.uses_wgmma): nvcc must build the architecture-specific
    # target (sm_90a), the only PTX that has it
    arch_specific: bool = False

    def __str__(self) -> str:
        return self.text

    def build_arch(self, arch: str) -> str:
        """The architecture nvcc builds this source for when asked for `arch`."""
        return f"{arch}a" if self.arch_specific and not arch.endswith("a") else arch


def render_cuda(program, ctx) -> CudaSource:
    return CudaSource(render_program(program, ctx.target.sm), ctx.target.name,
                      tuple(k.name for k in program.kernels), any(uses_wgmma(k) for k in program.kernels))


PASS = Pass("render", "cuda", "print the Kernel IR as one CUDA translation unit",
            lambda program, pctx: render_cuda(program, pctx.compile))
