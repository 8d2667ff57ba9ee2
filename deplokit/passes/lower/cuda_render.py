"""Kernel IR -> CUDA C++, the statement and kernel printer (see deplokit.passes.lower.cuda for
the whole contract): `_Renderer` walks a KernelFunc statement for statement, with the
expression printer of cuda_expr and the inline PTX of cuda_ptx mixed in, and writes the
kernel's signature, preamble (thread coordinates, mbarriers) and body.

    render_kernel(k, target_sm)   the text of one kernel
    render_program(p, target_sm)  one translation unit holding every kernel of a program
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterator

from ...ir.kernel_ir import (AtomicAdd, Assign, Barrier, Binary, Comment, Const, CpAsync, CpAsyncCommit,
                             CpAsyncWait, Declare, DeclareArray, For, GlobalStore, If, KernelFunc,
                             KernelProgram, MbarrierArrive, MbarrierInit, MbarrierWait, Param, ProxyFence, RegLoad,
                             SharedArray, SharedLoad, SharedStore, Special, SyncWarp, TmaLoad, TmaTensorLoad, Var,
                             VectorLoad, VectorStore)
from ...ir.names import fresh_name
from ...target import STATIC_SMEM_PER_BLOCK, WARP_SIZE
from ...ir.types import ctype_bytes
from .cuda_expr import (_PARAM_VALUE_TYPE, HALF_HEADERS, INDENT, PARAM_CTYPES, SCALAR_CTYPES, SPECIALS, ExprRenderer,
                        _format_int, _Scope, format_float, nan_minmax_decls, tf32_decls)
from .cuda_ptx import ELECT_DECL, ONE_THREAD, TENSOR_MAP_DECL, PtxRenderer, elects

__all__ = ["render_kernel", "render_program"]

MAX_THREADS = 1024


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
    names = {p.name for p in k.params} | {t.name for t in k.tensor_maps}
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


class _Renderer(ExprRenderer, PtxRenderer):
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
        self.needs_election = any(isinstance(n, ONE_THREAD) for n in _walk(k.body))
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
            self.declare_tma_destination(s)
        elif isinstance(s, GlobalStore):
            self.param(s.buffer, write=True)
            self.emit(f"{s.buffer}[{self.expr(s.offset, scope)}] = {self.expr(s.value, scope)};")
        elif isinstance(s, AtomicAdd):
            self.atomic_add(s, scope)
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
        elif isinstance(s, CpAsync):
            self.cp_async(s, scope)
        elif isinstance(s, CpAsyncCommit):
            self.cp_async_commit()
        elif isinstance(s, CpAsyncWait):
            self.cp_async_wait(s)
        elif isinstance(s, TmaLoad):
            self.tma_load(s, scope)
        elif isinstance(s, TmaTensorLoad):
            self.tma_tensor_load(s, scope)
        elif isinstance(s, MbarrierInit):
            self.mbarrier_init(s)
        elif isinstance(s, ProxyFence):
            self.proxy_fence()
        elif isinstance(s, (MbarrierArrive, MbarrierWait)):
            (self.mbarrier_arrive if isinstance(s, MbarrierArrive) else self.mbarrier_wait)(s, scope)
        elif isinstance(s, Comment):
            for line in str(s.text).splitlines() or [""]:
                self.emit(f"// {line}".rstrip())
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
        self.emit(f"for ({self.c_type('int')} {s.var} = {start}; {s.var} {cmp} {stop}; {step}) {{")
        self.depth += 1
        for st in s.body:
            self.stmt(st, inner)
        self.depth -= 1
        self.emit("}")

    def if_stmt(self, s: If, scope: _Scope, prefix: str) -> None:
        line = f"{prefix} ({self.elected_cond(s, scope) if s.elect else self.expr(s.cond, scope)}) {{"
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
        if k.tensor_maps or any(isinstance(n, TmaLoad) for n in nodes):
            self.need_sm(90, "TMA (cp.async.bulk)")
        if any(isinstance(n, (CpAsync, CpAsyncCommit, CpAsyncWait)) for n in nodes):
            self.need_sm(80, "cp.async")
        scope = _Scope()
        params = []
        for p in k.params:
            const = "const " if p.const else ""
            params.append(f"{const}{PARAM_CTYPES[p.ctype]}* __restrict__ {p.name}")
            scope.declare(p.name, "param")
        params += self.tensor_map_params(scope)
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
        self.declare_mbarriers(scope)
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
        head = [
            f"// {k.name}: grid ({', '.join(map(str, k.grid))}), block ({', '.join(map(str, k.block))})",
            f'extern "C" __global__ __launch_bounds__({bound}) void {k.name}({", ".join(params)}) {{',
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
    sm_80), an unknown operator, function or buffer, or too much static shared memory.
    Standalone: the min / max helpers it calls are declared before it."""
    return "\n".join(nan_minmax_decls(text := _Renderer(k, _target_sm(target_sm)).render()) + [text])


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
        f"// Build: nvcc -cubin -arch=sm_{sm} -O3 <this file>",
    ]
    if p.outputs:
        header.append(f"// Program outputs: {', '.join(p.outputs)}")
    parts = ["\n".join(header) + "\n"] + ([TENSOR_MAP_DECL] if any(k.tensor_maps for k in p.kernels) else [])
    parts += [ELECT_DECL] if any(elects(k, sm) for k in p.kernels) else []
    kernels = [_Renderer(k, sm).render() for k in p.kernels]      # the min / max helpers declared once
    text = "".join(kernels)
    headers = [h for t, h in HALF_HEADERS.items() if re.search(rf"\b{t}\b", text)]
    parts[:1] = [parts[0] + "".join(h + "\n" for h in headers)] if headers else parts[:1]
    return "\n".join(parts + nan_minmax_decls(text) + tf32_decls(text) + kernels)
