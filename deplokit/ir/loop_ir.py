"""Loop IR: one loop nest per kernel, in the seeds' text format.

    === merged_relu -> relu ===
    for a0 in 0..16:  # free (M)
        for a1 in 0..16:  # free (N)
            for a2 in 0..64:  # reduce (K)
                in0 = load bias[a2]
                ...
                acc0 <- add(acc0, v1)
            v2 = relu(acc0)  # epilogue (outside reduce)
            relu[a0, a1] = v2

An accumulator (`<-`) starts at its reduction's identity just before the outermost reduce
loop that contains it, and holds the reduced value after that loop.

A kernel may keep tensors to itself (`local causal[29]: one row of (1, 4, 37, 29) float32 at
a time, on chip`, printed under its header): it stores and loads them like any tensor, but
they never reach global memory (attention's scores; see passes/rows/rows.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..display import Displayable
from .index import Affine, format_index, free_vars, gathers
from .types import Buffer, TensorType, format_header, format_scalar

LoopOperand = Union[str, float, Affine]   # a value name, a scalar constant, an index value


def format_loop_operand(a: LoopOperand) -> str:
    if isinstance(a, str):
        return a
    if isinstance(a, Affine):
        return str(a)
    return format_scalar(a)


@dataclass(frozen=True)
class Load:
    dst: str
    tensor: str
    index: tuple[Affine, ...]
    pad: float | None = None          # value read where the index falls outside the tensor
    # Tile IR: elements one access moves inside a vector loop; 4 = one float4, stamped by
    # 005 blockify_launch where the access is aligned and contiguous (1 in Loop IR).
    width: int = 1
    # Tile IR, a load from a stage inside a vector loop: 4 = the 4 lanes read one 16-byte
    # aligned float4 of the shared slab (its rows, pad and buffer base keep it aligned),
    # stamped with the stage's copy stamps (stage_geometry.restamp_stages); else 1. Not
    # printed: it follows from the Stage line and the index, which are.
    shared_width: int = 1

    def text(self) -> str:
        pad = "" if self.pad is None else f" pad {format_scalar(self.pad)}"
        return f"{self.dst} = load {self.tensor}[{format_index(self.index)}]{pad}{_width_note(self.width)}"


@dataclass(frozen=True)
class Compute:
    dst: str
    op: str
    args: tuple[LoopOperand, ...]
    note: str = ""
    # The dtype of the value (the Tensor-IR node's): integers are computed exactly at their
    # width by every backend; printed only when it is not float32.
    dtype: str = "float32"

    def text(self) -> str:
        # a convert always says what it converts to: the storage / compute boundary is visible
        note = f" -> {self.dtype}" if self.op == "convert" else _dtype_note(self.dtype)
        return f"{self.dst} = {self.op}({', '.join(format_loop_operand(a) for a in self.args)}){note}"


# The op an accumulator prints with, by reduction.
_COMBINE_TEXT = {"sum": "add", "max": "max", "min": "min"}


@dataclass(frozen=True)
class Accumulate:
    acc: str
    reduction: str                    # sum | max | min
    value: str
    # Tile IR register tiles (008 register_tile): the element of the thread's register block
    # this accumulate folds into, one index per enclosing register loop; () for a scalar.
    index: tuple[Affine, ...] = ()
    dtype: str = "float32"            # the accumulator's (a sum of int64 stays int64)

    def text(self) -> str:
        acc = f"{self.acc}[{format_index(self.index)}]" if self.index else self.acc
        return f"{acc} <- {_COMBINE_TEXT[self.reduction]}({acc}, {self.value}){_dtype_note(self.dtype)}"


def _dtype_note(dtype: str) -> str:
    return "" if dtype == "float32" else f" -> {dtype}"


@dataclass(frozen=True)
class Store:
    tensor: str
    index: tuple[Affine, ...]
    value: LoopOperand
    width: int = 1                    # as Load.width

    def text(self) -> str:
        return f"{self.tensor}[{format_index(self.index)}] = {format_loop_operand(self.value)}{_width_note(self.width)}"


@dataclass(frozen=True)
class Assign:
    """Tile IR only: dst := value, a per-thread variable carried from one iteration of a serial loop to the
    next (an online reduction's running state: flash attention's running max, sum and output
    row). The first Assign of a name declares it; with an index, dst is a register array
    (its shape stamped on the kernel, `register dst[n]`) and the index a register loop's var."""
    dst: str
    value: "str | float | Affine"
    index: tuple[Affine, ...] = ()

    def text(self) -> str:
        dst = f"{self.dst}[{format_index(self.index)}]" if self.index else self.dst
        return f"{dst} := {format_loop_operand(self.value)}"


def _width_note(width: int) -> str:
    return "  # float4" if width == 4 else (f"  # {width} wide" if width > 1 else "")


@dataclass(frozen=True)
class Loop:
    var: str
    extent: int
    # free | reduce | serial (iterations in order, each reading what the previous one stored
    # in the kernel's locals: flash attention's online softmax); Tile IR adds register and vector
    kind: str
    body: tuple["Stmt", ...]
    role: str = ""                    # M, N or K in a matmul-like kernel; G: a batch axis that picks
                                      # an operand through a gather (a grouped matmul's expert tile)
    unroll: bool = False              # a scheduling hint (Tile IR's mark_unroll)
    # A bound known at run time only (a serial loop's, say flash-decoding's keys up to the
    # runtime position): iterations var >= stop are not run; extent stays the most it runs.
    # Set only where those iterations change nothing (their keys score -inf).
    stop: Affine | None = None

    def text(self) -> str:
        role = f" ({self.role})" if self.role else ""
        unroll = " unroll" if self.unroll else ""
        bound = f" while {self.var} < {self.stop}" if self.stop is not None else ""
        return f"for {self.var} in 0..{self.extent}{bound}:  # {self.kind}{role}{unroll}"


Stmt = Union[Load, Compute, Accumulate, Store, Loop]


def walk(body: tuple[Stmt, ...]):
    """Every statement, depth first, with its enclosing loops (outermost first)."""
    def rec(stmts, loops):
        for s in stmts:
            yield s, loops
            if isinstance(s, Loop):
                yield from rec(s.body, loops + (s,))
    yield from rec(body, ())


@dataclass(frozen=True)
class LocalBuffer:
    """A tensor a kernel writes and reads back itself, never in global memory: only one row
    of it (the dims in `row_dims`) exists at a time, on chip, for the iteration of the
    kernel's outer (row) loops that index its other dims (see passes/rows/rows.py).
    Loads and stores name it with its full index, so the interpreters treat it as a tensor."""
    name: str
    type: TensorType
    row_dims: tuple[int, ...]

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(self.type.shape[d] for d in self.row_dims)

    @property
    def row_numel(self) -> int:
        n = 1
        for e in self.row_shape:
            n *= e
        return n

    def text(self) -> str:
        row = ", ".join(str(e) for e in self.row_shape) or "1"
        return f"local {self.name}[{row}]: one row of {self.type} at a time, on chip"


@dataclass(frozen=True)
class FlashPlan:
    """How flash attention (passes/flash/attention.py) shares work: a block owns `query_tile`
    rows of `query` for `group` heads of `heads` (the query heads of one kv head), and reads
    keys and values in tiles of `key_tile` rows, each staged once per block; `causal`: the
    tiles above the diagonal are skipped (the key loop starts at the query tile's diagonal)."""
    query: str
    heads: str
    group: int
    query_tile: int
    key_tile: int
    causal: bool
    query_registers: bool = True    # each thread's query row in registers, else the block's in shared memory
    lanes: int = 1                  # threads sharing one query row (each 1/lanes of head_dim and columns)
    registers: str = ""             # why these rows and lanes: a thread's registers against its block's cap
    kv_group: int = 0               # query heads sharing one kv head, when a block serves fewer (`group` of them)
    fill: str = ""                  # how the grid was filled to the target's SMs (attention_plan.py)
    # flash-decoding (one query row): the keys split into `splits` ranges run by blocks of their
    # own, then combined (passes/flash/attention_split.py); `split` names the split kernel's loop
    splits: int = 1
    split: str = ""
    # half attention on tensor cores (deplokit.ir.flash_mma.FlashMma), else None: FFMA
    mma: object = None
    # lanes > 1: each lane sums its part of head_dim for every key of a tile, then a transposing
    # Combine leaves each lane the full scores of key_tile / lanes keys (the softmax runs on those
    # only, P gathered back for P @ V); else every lane all-reduces every score (flash_tile.py)
    scatter: bool = False
    # query rows a thread (scatter only): each staged K and V quad serves `rows` rows; the block's
    # query rows in shared memory (query_registers False), the score loop head_dim-outer
    # (flash_tile.py's two-row tile, docs/flash_hd128.md)
    rows: int = 1

    @property
    def rereads(self) -> int:
        """Blocks of one query tile that each stage the same K/V tiles (a sub-grouped GQA group)."""
        return self.kv_group // self.group if self.kv_group else 1

    def text(self) -> str:
        heads = f" x {self.group} heads" if self.group > 1 else ""
        if self.kv_group:       # a sub-group: the grid filled with blocks of fewer heads
            heads = f" x {self.group} head{'s' if self.group > 1 else ''} (of the {self.kv_group} sharing a kv head)"
        skip = "; key tiles above the causal diagonal skipped" if self.causal else ""
        if self.mma is not None:       # on tensor cores: the FFMA plan's rows, lanes and registers are not the kernel's
            return f"flash: {self.mma.text()}{skip}"
        if self.splits > 1:
            skip += f"; the keys split {self.splits} ways (a block a split" + \
                (f", loop {self.split}" if self.split else "") + "), the splits combined by a second kernel"
        where = "registers" if self.query_registers else "shared memory"
        where += f", {self.lanes} threads a row" if self.lanes > 1 else ""
        if self.scatter:
            where += f"; {self.rows} query rows a thread" if self.rows > 1 else ""
            where += (f"; each lane the full scores of {self.key_tile // self.lanes} keys of a tile (a transposing "
                      f"reduce: {self.lanes - 1}/{self.lanes} shuffles a score, not {self.lanes.bit_length() - 1}), "
                      f"the softmax on those, P gathered back")
        why = f" ({self.registers})" if self.registers else ""
        return (f"flash: a block owns {self.query_tile} query rows{heads} (in {where}), keys and values in "
                f"staged tiles of {self.key_tile}{skip}{why}" + (f"; {self.fill}" if self.fill else "")
                + (f"; {self.mma.text()}" if self.mma is not None else ""))


@dataclass(frozen=True)
class Kernel(Displayable):
    name: str
    outputs: tuple[str, ...]
    body: tuple[Stmt, ...]
    locals: tuple[LocalBuffer, ...] = ()   # tensors kept on chip (row fusion)
    flash: FlashPlan | None = None         # flash attention's online softmax (passes/flash/attention.py)

    def inputs(self) -> tuple[str, ...]:
        """Global tensors the kernel reads, in order of first read (not its locals)."""
        own = {b.name for b in self.locals}
        names: list[str] = []
        for s, _ in walk(self.body):
            if isinstance(s, Load):
                for g in (g for e in s.index for g in gathers(e)):
                    if g.tensor not in names:
                        names.append(g.tensor)
                if s.tensor not in names and s.tensor not in own:
                    names.append(s.tensor)
        return tuple(names)

    def __str__(self) -> str:
        lines = [f"=== {self.name} -> {', '.join(self.outputs)} ==="]
        lines += [b.text() for b in self.locals]
        lines += [self.flash.text()] if self.flash is not None else []
        _format_body(self.body, 0, lines)
        return "\n".join(lines)


def _format_body(body, depth, lines):
    pad = "    " * depth
    for s in body:
        note = f"  # {s.note}" if isinstance(s, Compute) and s.note else ""
        lines.append(pad + s.text() + note)
        if isinstance(s, Loop):
            _format_body(s.body, depth + 1, lines)


@dataclass(frozen=True)
class LoopProgram(Displayable):
    buffers: tuple[Buffer, ...]       # inputs, parameters, constants
    written: tuple[Buffer, ...]       # what the kernels write: outputs, and temps read by a later kernel
    kernels: tuple[Kernel, ...]
    outputs: tuple[str, ...]
    # After dedup (passes/dedup.py): the program these unique kernels stand for, and which
    # kernel each of its launches runs with which tensors. None and () before.
    whole: LoopProgram | None = None
    launches: tuple = ()
    # After lift (passes/fuse/lift.py): the Tensor-IR program whose nodes the kernels are,
    # one each, which fuse merges by; None once fused.
    graph: object = field(default=None, compare=False, repr=False)

    def types(self):
        return {b.name: b.type for b in self.buffers + self.written}

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def header(self) -> str:
        return format_header(self.buffers + self.written, self.outputs)

    def __str__(self) -> str:
        return "\n\n".join(str(k) for k in self.kernels)


def index_vars(index) -> frozenset[str]:
    """The variables an index (a tuple of Affines) reads."""
    return frozenset().union(*(free_vars(e) for e in index)) if index else frozenset()


def flash_parts(kernel: Kernel):
    """The parts of a flash-attention kernel (passes/flash/attention_loop.py) its plan and
    schedule read: (row loops, the serial key loop, the dot product's loop, q load, k load,
    v load); ValueError or StopIteration when the kernel has another shape."""
    rows, body = [], kernel.body
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "free":
        rows.append(body[0])
        body = body[0].body
    keys = next(s for s in body if isinstance(s, Loop) and s.kind == "serial")
    dot = next(s for s in keys.body if isinstance(s, Loop) and s.kind == "reduce")
    loads = [s for s in dot.body if isinstance(s, Load)]
    q = [s for s in loads if keys.var not in index_vars(s.index)]
    k = [s for s in loads if keys.var in index_vars(s.index)]
    col = [s for s in keys.body if isinstance(s, Loop)][-1]
    local = {b.name for b in kernel.locals}
    v = [s for s in col.body if isinstance(s, Load) and s.tensor not in local]
    if len(q) != 1 or len(k) != 1 or len(v) != 1:
        raise ValueError("not one query, one key and one value load")
    return tuple(rows), keys, dot, q[0], k[0], v[0]
