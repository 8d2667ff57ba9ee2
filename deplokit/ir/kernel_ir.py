"""Kernel IR: a scheduled kernel spelled in hardware primitives, one step above CUDA text.

A small C-like tree: typed scalar expressions, per-thread statements, shared arrays,
barriers, warp shuffles, cp.async groups, TMA with mbarriers, 128-bit vector accesses and
unroll hints. The CUDA renderer prints it; the SIMT simulator executes it with numpy,
every thread of every block at once. Every variable is per-thread (a register).

Index arithmetic is int, values are float (or bool for predicates); global buffers are
flat arrays addressed by element offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..display import Displayable
from .kernel_nodes import (  # noqa: F401  (re-exported: K.Var, K.For ... are Kernel IR's vocabulary)
    Assign, AtomicAdd, Barrier, Binary, Call, Comment, Const, CpAsync, CpAsyncCommit, CpAsyncWait, Declare,
    DeclareArray, Expr, For, GlobalLoad, GlobalStore, If, MbarrierInit, MbarrierWait, RegLoad, Select,
    SharedArray, SharedLoad, SharedStore, Shuffle, Special, Stmt, TmaLoad, Unary, Var, VectorLoad, VectorStore,
)
from .types import format_header, format_scalar


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str = "float"          # element type of the pointed-to buffer: float | int64 | int32
    const: bool = True            # read-only input
    size: int = 0                 # elements


@dataclass(frozen=True)
class KernelFunc(Displayable):
    name: str
    params: tuple[Param, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    body: tuple[Stmt, ...]
    # What nvcc's ptxas reported, filled in by runtime.nvcc when the kernel is compiled.
    registers: int | None = None
    smem_bytes: int | None = None
    spills: int | None = None

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def __str__(self) -> str:
        return format_kernel(self)


@dataclass(frozen=True)
class KernelProgram(Displayable):
    """Kernels in launch order; buffers as in Loop IR (inputs, params, consts, written)."""
    buffers: tuple
    written: tuple
    kernels: tuple[KernelFunc, ...]
    outputs: tuple[str, ...]

    def header(self) -> str:
        return format_header(tuple(self.buffers) + tuple(self.written), self.outputs)

    def __str__(self) -> str:
        return "\n\n".join(format_kernel(k) for k in self.kernels)


# -- text ------------------------------------------------------------------------------------------
# Kernel IR prints as a terse pseudo-C naming each primitive (global/shared loads, barrier,
# shfl_xor, cp.async ...): lower than Tile IR, but without CUDA's spelling.

_INFIX = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}


def walk_stmts(body):
    """Every statement of `body`, depth first, inside loops and both branches of an If."""
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)


def declared_smem_bytes(func: "KernelFunc") -> int:
    """Static shared memory the kernel declares: each shared float array rounded up to its
    alignment, and 8 bytes per mbarrier (ptxas's own figure, when known, is `smem_bytes`)."""
    total, barriers = 0, set()
    for s in walk_stmts(func.body):
        if isinstance(s, SharedArray):
            total += -(-4 * s.size // s.align) * s.align
        elif isinstance(s, MbarrierInit):
            barriers.add(s.name)
    return total + 8 * len(barriers)


def format_expr(e) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return format_scalar(e.value)
    if isinstance(e, Special):
        return e.name
    if isinstance(e, Binary):
        if e.op in _INFIX:
            return f"({format_expr(e.a)} {e.op} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, Unary):
        return f"{e.op}({format_expr(e.a)})"
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, GlobalLoad):
        return f"global {e.buffer}[{_strip(format_expr(e.offset))}]"
    if isinstance(e, SharedLoad):
        return f"shared {e.array}[{_strip(format_expr(e.offset))}]"
    if isinstance(e, Shuffle):
        return f"shfl_xor({format_expr(e.value)}, {e.lane_mask})"
    if isinstance(e, RegLoad):
        return f"{e.array}[{_strip(format_expr(e.index))}]"
    raise TypeError(e)


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and text.count("(") == 1 else text


def format_stmts(body, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    for s in body:
        if isinstance(s, Declare):
            init = "" if s.init is None else f" = {_strip(format_expr(s.init))}"
            lines.append(f"{pad}{s.ctype} {s.name}{init}")
        elif isinstance(s, DeclareArray):
            lines.append(f"{pad}float {s.name}[{s.size}] = {{{s.init}}}")
        elif isinstance(s, Assign):
            idx = "" if s.index is None else f"[{_strip(format_expr(s.index))}]"
            lines.append(f"{pad}{s.name}{idx} = {_strip(format_expr(s.value))}")
        elif isinstance(s, SharedArray):
            lines.append(f"{pad}shared float {s.name}[{s.size}]")
        elif isinstance(s, GlobalStore):
            lines.append(f"{pad}global {s.buffer}[{_strip(format_expr(s.offset))}] = {_strip(format_expr(s.value))}")
        elif isinstance(s, AtomicAdd):
            lines.append(f"{pad}atomic global {s.buffer}[{_strip(format_expr(s.offset))}] += "
                         f"{_strip(format_expr(s.value))}")
        elif isinstance(s, SharedStore):
            lines.append(f"{pad}shared {s.array}[{_strip(format_expr(s.offset))}] = {_strip(format_expr(s.value))}")
        elif isinstance(s, VectorLoad):
            lines.append(f"{pad}{', '.join(s.dsts)} = {s.space} float4 {s.source}[{_strip(format_expr(s.offset))}]")
        elif isinstance(s, VectorStore):
            vals = ", ".join(format_expr(v) for v in s.values)
            lines.append(f"{pad}{s.space} float4 {s.target}[{_strip(format_expr(s.offset))}] = ({vals})")
        elif isinstance(s, For):
            unroll = "  # unroll" if s.unroll else ""
            lines.append(f"{pad}for {s.var} = {_strip(format_expr(s.start))}; < {_strip(format_expr(s.stop))}; "
                         f"+= {_strip(format_expr(s.step))}:{unroll}")
            format_stmts(s.body, depth + 1, lines)
        elif isinstance(s, If):
            lines.append(f"{pad}if {_strip(format_expr(s.cond))}:")
            format_stmts(s.then, depth + 1, lines)
            if s.orelse:
                lines.append(f"{pad}else:")
                format_stmts(s.orelse, depth + 1, lines)
        elif isinstance(s, Barrier):
            lines.append(f"{pad}barrier")
        elif isinstance(s, CpAsync):
            lines.append(f"{pad}cp.async {s.nbytes}B shared {s.array}[{_strip(format_expr(s.dst_offset))}] <- "
                         f"global {s.buffer}[{_strip(format_expr(s.src_offset))}]")
        elif isinstance(s, CpAsyncCommit):
            lines.append(f"{pad}cp.async.commit")
        elif isinstance(s, CpAsyncWait):
            lines.append(f"{pad}cp.async.wait {s.pending}")
        elif isinstance(s, TmaLoad):
            lines.append(f"{pad}tma {s.count} floats shared {s.array}[{_strip(format_expr(s.dst_offset))}] <- "
                         f"global {s.buffer}[{_strip(format_expr(s.src_offset))}] on {s.barrier}")
        elif isinstance(s, MbarrierInit):
            lines.append(f"{pad}mbarrier.init {s.name} count {s.count}")
        elif isinstance(s, MbarrierWait):
            lines.append(f"{pad}mbarrier.wait {s.name} phase {format_expr(s.phase)}")
        elif isinstance(s, Comment):
            lines.append(f"{pad}// {s.text}")
        else:
            raise TypeError(s)


def format_kernel(k: KernelFunc) -> str:
    lines = [f"=== {k.name} grid={k.grid} block={k.block} ==="]
    for p in k.params:
        lines.append(f"# param {p.name}: {'const ' if p.const else ''}{p.ctype}[{p.size}]")
    if k.registers is not None:
        lines.append(f"# ptxas: {k.registers} registers, {k.smem_bytes} bytes smem, {k.spills} bytes spilled")
    format_stmts(k.body, 0, lines)
    return "\n".join(lines)



