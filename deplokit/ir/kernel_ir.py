"""Kernel IR: a scheduled kernel spelled in hardware primitives, one step above CUDA text.

A small C-like tree: typed scalar expressions, per-thread statements, shared arrays,
barriers, warp shuffles, cp.async groups, TMA with mbarriers, 128-bit vector accesses and
unroll hints. The CUDA renderer prints it; the SIMT simulator executes it with numpy,
every thread of every block at once. Every variable is per-thread (a register).

Index arithmetic is int (32-bit, or 64-bit in a kernel stamped `index_bits=64`); a value is
held at its dtype (float, int64, int32 or bool: ir/types.DTYPE_CTYPE), integers exactly, with
an explicit Cast where floats and integers meet; global buffers are flat arrays addressed by
element offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..display import Displayable
from .kernel_text import format_expr, format_kernel, format_stmts  # noqa: F401  (Kernel IR prints as this text)
from .kernel_tma import TensorMap, TmaTensorLoad  # noqa: F401  (TMA's nodes, kernel_tma.py)
from .types import ctype_bytes, format_header

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
    """__shfl_xor_sync(full mask, value, lane_mask): the value held by lane ^ lane_mask."""
    value: "Expr"
    lane_mask: int


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
class AtomicAdd:
    """atomicAdd(&buffer[offset], value) on a global float: a read-modify-write no other
    access splits, so every thread's add lands (split-K partial sums). The order of the adds
    is unspecified on a GPU (float results may differ in the last bits from run to run); the
    simulator applies them in lane order, block by block, so it is deterministic."""
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
    unroll: bool = False


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()
    # cond (tid.x == 0) picks the one thread that issues block-uniform work (a TMA producer's
    # waits, arrivals and copies): sm_90 may elect it (warp 0, elect.sync), which lets ptxas
    # issue the copies without a loop over the warp's distinct operands
    elect: bool = False


@dataclass(frozen=True)
class Barrier:
    """__syncthreads(): every thread of the block reaches it before any goes on."""


@dataclass(frozen=True)
class SyncWarp:
    """__syncwarp(): a warp reconverges after a branch some lanes skipped, before a Shuffle."""


@dataclass(frozen=True)
class CpAsync:
    """cp.async of `nbytes` (4, 8 or 16) from global to shared; lands by a later wait."""
    array: str
    dst_offset: Expr
    buffer: str
    src_offset: Expr
    nbytes: int = 4


@dataclass(frozen=True)
class CpAsyncCommit:
    pass


@dataclass(frozen=True)
class CpAsyncWait:
    pending: int = 0              # wait until at most this many groups are in flight


@dataclass(frozen=True)
class TmaLoad:
    """Bulk copy of a contiguous run of `count` floats from global to shared, completing on
    mbarrier `barrier` (sm_90 cp.async.bulk): its bytes count down the barrier's expected
    transaction count (complete_tx). Issued by one thread. `slot`: which mbarrier of the
    array `barrier` names (a stage ring's full barrier; None: a single mbarrier). `expect`:
    the issuing thread also arrives on the barrier announcing the copy's bytes
    (arrive.expect_tx); False when an MbarrierArrive with expect_tx announced the bytes of
    the whole group (passes/lower/stage_plan.py SlotBarrier)."""
    array: str
    dst_offset: Expr
    buffer: str
    src_offset: Expr
    count: int
    barrier: str
    slot: Expr | None = None
    expect: bool = True


@dataclass(frozen=True)
class MbarrierInit:
    """`slots` mbarriers called name[0..slots) (one when slots is 1), each completing a phase
    when `count` arrivals have been made and every announced transaction byte has landed."""
    name: str
    count: int = 1
    slots: int = 1


@dataclass(frozen=True)
class MbarrierArrive:
    """Every thread that runs it arrives once on mbarrier name[slot]. expect_tx > 0: the
    arrival also announces that many bytes of copies completing on this phase
    (mbarrier.arrive.expect_tx; one thread makes it)."""
    name: str
    slot: Expr | None = None
    expect_tx: int = 0


@dataclass(frozen=True)
class ProxyFence:
    """fence.proxy.async.shared::cta: the shared-memory stores the thread made as ordinary
    stores (the generic proxy) are ordered before its later operations of the async proxy
    (TMA copies) on the same shared memory; each thread that stored fences before the
    barrier that hands the memory to the copy's issuer."""


@dataclass(frozen=True)
class MbarrierWait:
    """Wait until the phase of mbarrier name[slot] whose parity is `phase & 1` has completed
    (mbarrier.try_wait.parity: it returns once the barrier's current phase has the other
    parity; a barrier that never completed a phase counts parity 1 as completed)."""
    name: str
    phase: Expr
    slot: Expr | None = None


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Union[Declare, DeclareArray, Assign, SharedArray, GlobalStore, AtomicAdd, SharedStore, VectorLoad, VectorStore,
             For, If, Barrier, SyncWarp, CpAsync, CpAsyncCommit, CpAsyncWait, TmaLoad, TmaTensorLoad, MbarrierInit,
             MbarrierArrive, MbarrierWait, ProxyFence, Comment]


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
    # Split-K: tensors that must hold zero before it runs (TileKernel.zero_init); on the
    # kernel that clears them (k003_zero_init), the kernel it runs before (runtime/launches.py).
    zero_init: tuple[str, ...] = ()
    zero_init_for: str = ""
    # Split-K without atomics (003): on the reducer, the kernel whose workspace of partial
    # sums it adds up; it runs just after each launch of that kernel (runtime/launches.py).
    reduces_for: str = ""
    # On a repack kernel (011, passes/schedule/repack.py): the kernel whose operand it copies
    # into a 16-byte pitched workspace; it runs just before each launch of it.
    repacks_for: str = ""
    # Bytes of dynamic shared memory the launch gives the kernel (its SharedArrays with an
    # offset live there: k002 carves them when a block's arrays exceed the static limit).
    dynamic_smem: int = 0
    # Width of the index arithmetic (offsets, thread/block decomposition, loop variables):
    # 64 where an offset can pass 2**31 - 1 (k001 decides it from the tensors' sizes and the
    # launch), 32 elsewhere (faster).
    index_bits: int = 32
    # TMA (sm_90): the tensor maps the kernel takes after its buffer parameters.
    tensor_maps: tuple[TensorMap, ...] = ()

    def tensor_map(self, name: str) -> TensorMap:
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


def declared_smem_bytes(func: "KernelFunc") -> int:
    """Static shared memory declared, placed as the renderer places it: 8 bytes per mbarrier,
    then each static shared array at the next multiple of its alignment (16 bytes; a TMA box's
    1024), rounded up to 16 (ptxas's figure is `smem_bytes`); dynamic arrays: `dynamic_smem`."""
    arrays, barriers = [], {}
    for s in walk_stmts(func.body):
        if isinstance(s, SharedArray) and s.offset is None:
            arrays.append(s)
        elif isinstance(s, MbarrierInit):
            barriers.setdefault(s.name, s.slots)
    total = 8 * sum(barriers.values())
    for s in arrays:
        total = -(-total // s.align) * s.align + ctype_bytes(s.ctype) * s.size
    return -(-total // 16) * 16
