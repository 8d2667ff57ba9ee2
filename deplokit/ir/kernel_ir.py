"""Kernel IR: a scheduled kernel spelled in hardware primitives, one step above CUDA text.

A small C-like tree: typed scalar expressions, per-thread statements, shared arrays,
barriers, warp shuffles, 128-bit vector accesses and unroll hints. The CUDA renderer prints
it; the SIMT simulator executes it with numpy, every thread of every block at once. Every
variable is per-thread (a register).

Index arithmetic is int (32-bit, or 64-bit in a kernel stamped `index_bits=64`); a value is
held at its dtype (float, int64, int32 or bool: ir/types.DTYPE_CTYPE), integers exactly, with
an explicit Cast where floats and integers meet; global buffers are flat arrays addressed by
element offset.

One module, one concept, in reading order: the expression and statement nodes, the
statements that stand for a stage between two lowering passes, the kernel and program,
walking, the text every node prints as (dispatched on the node's type), and the names a
kernel declares with their renaming. The statements of the advanced features live in
modules of their own and print themselves: cp.async copies (kernel_cp_async.py), TMA
copies and mbarriers (kernel_tma.py, with the tensor maps a kernel takes), the tensor cores'
(kernel_mma.py, kernel_wgmma.py) and the split-K tail's (kernel_split.py).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Union

from ..display import Displayable
from .c_names import c_rejects
from .types import ctype_bytes, format_header, format_scalar

# -- expressions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Const:
    value: float | int | bool
    ctype: str = "float"          # float | int | int64 | int32 | bool


@dataclass(frozen=True)
class Cast:
    """a converted to `ctype` as C converts it: float -> integer truncates toward zero, an
    integer -> float rounds to nearest, int64 -> int32 wraps."""
    ctype: str                    # float | int | int64 | int32 | bool
    a: "Expr"


@dataclass(frozen=True)
class Special:
    """threadIdx.x/y/z, blockIdx.x/y/z, blockDim.x.. and the lane/warp of the thread."""
    name: str                     # tid.x tid.y tid.z bid.x bid.y bid.z lane warp


@dataclass(frozen=True)
class Binary:
    op: str                       # + - * / % // min max < <= > >= == != && || & | ^ << >>
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Unary:
    op: str                       # neg, not
    a: "Expr"


@dataclass(frozen=True)
class Call:
    """A math function on floats: exp log sqrt rsqrt tanh erf sin cos abs pow sigmoid relu
    reciprocal maximum minimum (the names of deplokit's elementwise ops; maximum and minimum
    propagate a NaN as torch does, C's fmaxf / fminf by those names return the other operand)."""
    fn: str
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class GlobalLoad:
    buffer: str                   # a kernel parameter
    offset: "Expr"                # element offset into the flat buffer
    ctype: str = "float"          # float | int64 | int32 | bool (a value), int (an index read as int)


@dataclass(frozen=True)
class SharedLoad:
    array: str
    offset: "Expr"


@dataclass(frozen=True)
class Shuffle:
    """__shfl_xor_sync(full mask, value, lane_mask): the value held by lane ^ lane_mask. With a
    width (a power of 2 up to 32): __shfl_sync(full mask, value, lane_mask, width), the value
    held by lane `lane_mask` of the thread's group of `width` lanes (a broadcast)."""
    value: "Expr"
    lane_mask: int
    width: int = 0


@dataclass(frozen=True)
class RegLoad:
    """A register-array element (register tiles)."""
    array: str
    index: "Expr"


Expr = Union[Var, Const, Cast, Special, Binary, Unary, Call, Select, GlobalLoad, SharedLoad, Shuffle, RegLoad]

# -- statements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Declare:
    name: str
    ctype: str                    # float | int (an index) | int64 | int32 | bool
    init: Expr | None = None


@dataclass(frozen=True)
class DeclareArray:
    """A per-thread register array (register tiles): float name[size] = {init,...}."""
    name: str
    size: int
    init: float | int = 0.0
    ctype: str = "float"          # an integer contraction's tile holds its integers exactly


@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr
    index: Expr | None = None     # set for a register-array element


@dataclass(frozen=True)
class SharedArray:
    name: str
    size: int                     # elements
    align: int = 16
    ctype: str = "float"          # the element type (an integer reduction's partials stay exact)
    # byte offset in the kernel's dynamic shared memory (KernelFunc.dynamic_smem), where a
    # kernel needing more than a block may declare statically carves its arrays; None:
    # a static __shared__ array
    offset: int | None = None


@dataclass(frozen=True)
class GlobalStore:
    buffer: str
    offset: Expr
    value: Expr


@dataclass(frozen=True)
class SharedStore:
    array: str
    offset: Expr
    value: Expr


@dataclass(frozen=True)
class VectorLoad:
    """float4 read of 4 consecutive floats at a 16-byte aligned offset into 4 registers."""
    dsts: tuple[str, str, str, str]
    space: str                    # global | shared
    source: str
    offset: Expr


@dataclass(frozen=True)
class VectorStore:
    space: str                    # global | shared
    target: str
    offset: Expr
    values: tuple[Expr, Expr, Expr, Expr]


@dataclass(frozen=True)
class For:
    var: str
    start: Expr
    stop: Expr                    # exclusive
    step: Expr
    body: tuple["Stmt", ...]
    unroll: bool = False          # `#pragma unroll`: nvcc unrolls it fully
    # `#pragma unroll 1`: nvcc keeps the loop, one trip's values live at a time (left to
    # itself it unrolls a small strided loop up to 4 times, and their values overlap)
    rolled: bool = False


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()
    # cond (tid.x == 0) picks the one thread that issues block-uniform work (a TMA producer's
    # waits, arrivals and copies): sm_90 may elect it (warp 0, elect.sync), which lets ptxas
    # issue the copies without a loop over the warp's distinct operands
    elect: bool = False
    # a warp-specialised split (ir/warp_roles.py): `then` is the producer warpgroup, `orelse`
    # the consumers; whole warpgroups on each side, running concurrently (the simulator
    # interleaves them at their mbarrier waits)
    roles: bool = False


@dataclass(frozen=True)
class Barrier:
    """__syncthreads(): every thread of the block reaches it before any goes on."""


@dataclass(frozen=True)
class SyncWarp:
    """__syncwarp(): a warp reconverges after a branch some lanes skipped, before a Shuffle."""


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Union[Declare, DeclareArray, Assign, SharedArray, GlobalStore, SharedStore, VectorLoad, VectorStore,
             For, If, Barrier, SyncWarp, Comment]


# -- statements pending a later lowering pass ----------------------------------------------
# Kernel-IR statements that stand for a shared-memory stage between two lowering passes.
#
# 001_materialize lowers every statement of a Tile kernel but the copies of its Stages: it
# leaves a StageCopy where a Stage was, a StageWait where an AsyncWait was and a
# StagePrologue before a K loop whose head holds stages. 002_stage_copies replaces them with
# the copies (float4, cp.async, TMA), the waits and the barriers (passes/lower/stage_copy.py).
# Each records what the copy needs to know about the place it was issued from: the Tile-IR
# stage, the K loop it sits in and the ranges of the variables in scope. They print, so the
# `-vv` diff of 002 shows what each became; the simulator and the renderer never see them.


@dataclass(frozen=True)
class StageCopy:
    stage: object                       # the Tile-IR Stage
    loop_info: tuple | None             # (enclosing Tile-IR Loop, depth of that loop statement), None
    loop_depth: int                     # loops enclosing the stage
    ranges: tuple[tuple[str, int], ...]  # variables in scope -> extent

    @property
    def shared_array(self) -> str:
        return self.stage.name

    def text(self) -> str:
        return f"stage {self.stage.text()}  # copied by 002_stage_copies"


@dataclass(frozen=True)
class StageWait:
    wait: object                        # the Tile-IR AsyncWait

    def text(self) -> str:
        return f"stage wait {', '.join(self.wait.stages)}  # 002_stage_copies"


@dataclass(frozen=True)
class StagePrologue:
    loop: object                        # the Tile-IR K loop that follows
    depth: int                          # depth of the loop statement
    ranges: tuple[tuple[str, int], ...]

    def text(self) -> str:
        return f"stage prologue of K loop {self.loop.var}  # 002_stage_copies"


PendingStmt = Union[StageCopy, StageWait, StagePrologue]


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
    # Split-K without atomics (003): on the reducer, the kernel whose workspace of partial
    # sums it adds up; it runs just after each launch of that kernel (runtime/launches.py).
    reduces_for: str = ""
    # On a repack kernel (011, passes/repack/repack.py): the kernel whose operand it copies
    # into a 16-byte pitched workspace; it runs just before each launch of it.
    repacks_for: str = ""
    # Bytes of dynamic shared memory the launch gives the kernel (its SharedArrays with an
    # offset live there: k002 carves them when a block's arrays exceed the static limit).
    dynamic_smem: int = 0
    # Width of the index arithmetic (offsets, thread/block decomposition, loop variables):
    # 64 where an offset can pass 2**31 - 1 (k001 decides it from the tensors' sizes and the
    # launch), 32 elsewhere (faster).
    index_bits: int = 32
    # TMA (sm_90): the tensor maps (kernel_tma.TensorMap) the kernel takes after its buffer parameters.
    tensor_maps: tuple = ()
    # blocks an SM must hold at once (__launch_bounds__'s second argument: ptxas keeps a thread
    # within 65536 / (threads x blocks) registers); 0: no such bound
    min_blocks: int = 0

    def tensor_map(self, name: str):
        for t in self.tensor_maps:
            if t.name == name:
                return t
        raise KeyError(name)

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


# -- walking ---------------------------------------------------------------------------------------

def walk_stmts(body):
    """Every statement of `body`, depth first, inside loops and both branches of an If."""
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)


# thread coordinates that differ between the threads of a block
THREAD_SPECIALS = {"tid.x", "tid.y", "tid.z", "lane", "warp"}


def stmt_exprs(s):
    """The expressions a statement evaluates itself (not those of nested statements)."""
    if isinstance(s, For):
        return (s.start, s.stop, s.step)
    if isinstance(s, If):
        return (s.cond,)
    out = []
    for name in ("init", "value", "index", "offset"):
        e = getattr(s, name, None)
        if e is not None and not isinstance(e, (int, float, str)):
            out.append(e)
    out += list(getattr(s, "values", ()))
    for name in getattr(s, "MORE_EXPRS", ()):      # a feature's own fields: an Expr, None or a tuple of them
        e = getattr(s, name)
        out += e if isinstance(e, tuple) else [] if e is None else [e]
    return tuple(out)


def subexprs(e):
    """e and every expression inside it."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        t = type(x)
        if t is Binary:
            stack += (x.a, x.b)
        elif t is Unary or t is Cast:
            stack.append(x.a)
        elif t is Call:
            stack.extend(x.args)
        elif t is Select:
            stack += (x.cond, x.a, x.b)
        elif t is GlobalLoad or t is SharedLoad:
            stack.append(x.offset)
        elif t is Shuffle:
            stack.append(x.value)
        elif t is RegLoad:
            stack.append(x.index)


def varies(e, varying) -> bool:
    """Whether expression `e` may differ between the threads of a block."""
    if e is None:
        return False
    for x in subexprs(e):
        if isinstance(x, Special) and x.name in THREAD_SPECIALS:
            return True
        if isinstance(x, Var) and x.name in varying:
            return True
        # a global read at an address every thread computes alike (a runtime scalar, pos[0])
        # reads one value: uniform where its offset is (subexprs visits the offset too)
        if isinstance(x, (SharedLoad, RegLoad, Shuffle)) or (isinstance(x, GlobalLoad) and x.buffer in varying):
            return True
    return False


def declared_smem_bytes(func: "KernelFunc") -> int:
    """Static shared memory declared, placed as the renderer places it: first what a feature's
    statement declares at the top of the kernel (`preamble_smem_bytes`: kernel_tma's
    mbarriers, 8 bytes each), then each static shared array at the next multiple of its
    alignment (16 bytes; a TMA box's 1024), rounded up to 16 (ptxas's figure is `smem_bytes`);
    dynamic arrays: `dynamic_smem`."""
    arrays, preamble = [], {}
    for s in walk_stmts(func.body):
        if isinstance(s, SharedArray) and s.offset is None:
            arrays.append(s)
        elif hasattr(s, "preamble_smem_bytes"):
            preamble.setdefault(s.name, s.preamble_smem_bytes)
    total = sum(preamble.values())
    for s in arrays:
        total = -(-total // s.align) * s.align + ctype_bytes(s.ctype) * s.size
    return -(-total // 16) * 16


# -- text: a terse pseudo-C naming each primitive (global/shared loads, barrier, shfl_xor ...),
# lower than Tile IR but without CUDA's spelling -------------------------------------------

_INFIX = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}


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
    if isinstance(e, Cast):
        return f"{e.ctype}({_strip(format_expr(e.a))})"
    if isinstance(e, Unary):
        return f"{e.op}({format_expr(e.a)})"
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, GlobalLoad):
        return f"global {format_at(e.buffer, e.offset)}"
    if isinstance(e, SharedLoad):
        return f"shared {format_at(e.array, e.offset)}"
    if isinstance(e, Shuffle):
        if e.width:
            return f"shfl_idx({format_expr(e.value)}, {e.lane_mask}, width={e.width})"
        return f"shfl_xor({format_expr(e.value)}, {e.lane_mask})"
    if isinstance(e, RegLoad):
        return format_at(e.array, e.index)
    raise TypeError(e)


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and text.count("(") == 1 else text


def format_plain(e) -> str:
    """An expression as it prints, without its outer parentheses."""
    return _strip(format_expr(e))


def format_at(array: str, offset) -> str:
    """array[offset], as every memory access prints."""
    return f"{array}[{format_plain(offset)}]"


def format_copy(s) -> str:
    """What an asynchronous copy moves (cp.async, TMA): shared X[dst] <- global Y[src]."""
    return f"shared {format_at(s.array, s.dst_offset)} <- global {format_at(s.buffer, s.src_offset)}"


def format_stmts(body, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    for s in body:
        if isinstance(s, Declare):
            init = "" if s.init is None else f" = {_strip(format_expr(s.init))}"
            lines.append(f"{pad}{s.ctype} {s.name}{init}")
        elif isinstance(s, DeclareArray):
            lines.append(f"{pad}{s.ctype} {s.name}[{s.size}] = {{{s.init}}}")
        elif isinstance(s, Assign):
            idx = "" if s.index is None else f"[{_strip(format_expr(s.index))}]"
            lines.append(f"{pad}{s.name}{idx} = {_strip(format_expr(s.value))}")
        elif isinstance(s, SharedArray):
            where = f"  # dynamic smem + {s.offset}" if s.offset is not None else ""
            lines.append(f"{pad}shared {s.ctype} {s.name}[{s.size}]{where}")
        elif isinstance(s, GlobalStore):
            lines.append(f"{pad}global {format_at(s.buffer, s.offset)} = {format_plain(s.value)}")
        elif isinstance(s, SharedStore):
            lines.append(f"{pad}shared {format_at(s.array, s.offset)} = {format_plain(s.value)}")
        elif isinstance(s, VectorLoad):
            lines.append(f"{pad}{', '.join(s.dsts)} = {s.space} float4 {format_at(s.source, s.offset)}")
        elif isinstance(s, VectorStore):
            vals = ", ".join(format_expr(v) for v in s.values)
            lines.append(f"{pad}{s.space} float4 {format_at(s.target, s.offset)} = ({vals})")
        elif isinstance(s, For):
            unroll = "  # unroll" if s.unroll else "  # rolled" if s.rolled else ""
            lines.append(f"{pad}for {s.var} = {_strip(format_expr(s.start))}; < {_strip(format_expr(s.stop))}; "
                         f"+= {_strip(format_expr(s.step))}:{unroll}")
            format_stmts(s.body, depth + 1, lines)
        elif isinstance(s, If):
            role = ("  # producer warpgroup", "  # consumers") if s.roles else ("", "")
            lines.append(f"{pad}if {_strip(format_expr(s.cond))}:{role[0]}")
            format_stmts(s.then, depth + 1, lines)
            if s.orelse:
                lines.append(f"{pad}else:{role[1]}")
                format_stmts(s.orelse, depth + 1, lines)
        elif isinstance(s, Barrier):
            lines.append(f"{pad}barrier")
        elif isinstance(s, SyncWarp):
            lines.append(f"{pad}syncwarp")
        elif isinstance(s, Comment):
            lines.append(f"{pad}// {s.text}")
        elif isinstance(s, (StageCopy, StageWait, StagePrologue)):   # pending a later pass
            lines.append(pad + s.text())
        elif callable(getattr(s, "text", None)):    # a feature's statement (kernel_tma.py, ...) says itself
            lines.append(pad + s.text())
        else:
            raise TypeError(s)


def format_kernel(k: KernelFunc) -> str:
    lines = [f"=== {k.name} grid={k.grid} block={k.block} ==="]
    if k.index_bits != 32:
        lines.append(f"# {k.index_bits}-bit index arithmetic")
    if k.reduces_for:
        lines.append(f"# adds up the split-K partial sums of {k.reduces_for}")
    if k.repacks_for:
        lines.append(f"# repacks an operand of {k.repacks_for} into 16-byte rows")
    if k.dynamic_smem:
        lines.append(f"# dynamic shared memory: {k.dynamic_smem} bytes")
    for p in k.params:
        lines.append(f"# param {p.name}: {'const ' if p.const else ''}{p.ctype}[{p.size}]")
    for t in k.tensor_maps:
        lines.append(f"# param {t.name}: {t.text()}")
    if k.registers is not None:
        lines.append(f"# ptxas: {k.registers} registers, {k.smem_bytes} bytes smem, {k.spills} bytes spilled")
    format_stmts(k.body, 0, lines)
    return "\n".join(lines)


# -- names: the names a kernel declares, and a renaming of them -------------------------------
# The names a Kernel-IR kernel declares, and a renaming of them.
#
# Parameters are bound by name (the launch passes the buffer called so) and kernels are
# looked up by name, but every other name (registers, loop variables, shared arrays,
# mbarriers) is private to its kernel. A generated local may meet a tensor's name (an input
# called `tid`, `acc0` or `x_smem`): C rejects the redeclaration, or the local silently
# shadows the buffer. `unclash_locals` renames such locals; `name_problems` reports every
# name CUDA C++ would reject, for the simulator to refuse what nvcc refuses.

# (node class, field) pairs that name a kernel-local; every other str field names a
# parameter (a buffer), an operator or a thread coordinate.
_LOCAL_FIELDS = {
    Var: ("name",), Declare: ("name",), DeclareArray: ("name",), Assign: ("name",),
    SharedArray: ("name",), SharedLoad: ("array",), RegLoad: ("array",),
    SharedStore: ("array",), For: ("var",),
}


def _local_fields(node) -> tuple[str, ...]:
    fields = _LOCAL_FIELDS.get(type(node), getattr(type(node), "LOCAL_FIELDS", ()))   # a feature's node says
    if isinstance(node, VectorLoad):
        return ("dsts",) + (("source",) if node.space == "shared" else ())
    if isinstance(node, VectorStore) and node.space == "shared":
        return ("target",)
    return fields


def _nodes(node):
    yield node
    if isinstance(node, tuple):
        for item in node:
            yield from _nodes(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from _nodes(getattr(node, f.name))


def declared_locals(k: KernelFunc) -> list[str]:
    """Every local name of `k`, in first-seen order."""
    out: dict[str, None] = {}
    for n in _nodes(k.body):
        for f in _local_fields(n):
            v = getattr(n, f)
            for name in (v if isinstance(v, tuple) else (v,)):
                out.setdefault(name, None)
    return list(out)


def _rename(node, mapping: dict[str, str]):
    if isinstance(node, tuple):
        return tuple(_rename(item, mapping) for item in node)
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    local = _local_fields(node)
    changes = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if f.name in local:
            new = tuple(mapping.get(x, x) for x in v) if isinstance(v, tuple) else mapping.get(v, v)
        else:
            new = _rename(v, mapping)
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def unclash_locals(k: KernelFunc) -> KernelFunc:
    """`k` with every local that C would reject or that meets a parameter's name renamed
    to a free `name_N`; `k` itself when there is none."""
    outer = {p.name for p in k.params} | {t.name for t in k.tensor_maps}
    locals_ = declared_locals(k)
    taken = outer | set(locals_) | {k.name}
    mapping = {}
    for name in locals_:
        if name in outer or c_rejects(name):
            # from a base C accepts (no `__`, no leading `_`), so some `base_N` is free
            base = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).strip("_") or "v"
            base = base if not base[0].isdigit() else f"v_{base}"
            n, cand = 1, f"{base}_1"
            while cand in taken or c_rejects(cand):
                n, cand = n + 1, f"{base}_{n + 1}"
            taken.add(cand)
            mapping[name] = cand
    return dataclasses.replace(k, body=_rename(k.body, mapping)) if mapping else k


def name_problems(k: KernelFunc) -> list[str]:
    """What CUDA C++ would reject in `k`'s names (empty when nothing)."""
    problems = []
    why = c_rejects(k.name)
    if why:
        problems.append(f"kernel name {k.name!r} {why}")
    params = set()
    for p in tuple(k.params) + tuple(k.tensor_maps):
        why = c_rejects(p.name)
        if why:
            problems.append(f"parameter {p.name!r} {why}")
        params.add(p.name)
    for name in declared_locals(k):
        why = c_rejects(name)
        if why:
            problems.append(f"local {name!r} {why}")
        elif name in params:
            problems.append(f"local {name!r} is declared with the name of parameter {name!r}")
    return problems
