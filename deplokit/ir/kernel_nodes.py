"""Kernel IR's nodes: typed scalar expressions and per-thread statements (kernel_ir.py holds
the kernels made of them, their walk and their text, and re-exports these, so `K.Var` works).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

# -- expressions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Const:
    value: float | int | bool
    ctype: str = "float"          # float | int | bool


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
    reciprocal fmaxf fminf (the names of deplokit's elementwise ops)."""
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
    ctype: str = "float"          # float | int (index tensors: int64/int32 read as int)


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


Expr = Union[Var, Const, Special, Binary, Unary, Call, Select, GlobalLoad, SharedLoad, Shuffle, RegLoad]

# -- statements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Declare:
    name: str
    ctype: str                    # float | int | bool
    init: Expr | None = None


@dataclass(frozen=True)
class DeclareArray:
    """A per-thread register array (register tiles): float name[size] = {init,...}."""
    name: str
    size: int
    init: float = 0.0


@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr
    index: Expr | None = None     # set for a register-array element


@dataclass(frozen=True)
class SharedArray:
    name: str
    size: int                     # elements (float)
    align: int = 16


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


@dataclass(frozen=True)
class Barrier:
    """__syncthreads(): every thread of the block reaches it before any goes on."""


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
    mbarrier `barrier` (sm_90 cp.async.bulk). Issued by one thread."""
    array: str
    dst_offset: Expr
    buffer: str
    src_offset: Expr
    count: int
    barrier: str


@dataclass(frozen=True)
class MbarrierInit:
    name: str
    count: int = 1


@dataclass(frozen=True)
class MbarrierWait:
    name: str
    phase: Expr


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Union[Declare, DeclareArray, Assign, SharedArray, GlobalStore, AtomicAdd, SharedStore, VectorLoad, VectorStore,
             For, If, Barrier, CpAsync, CpAsyncCommit, CpAsyncWait, TmaLoad, MbarrierInit, MbarrierWait, Comment]
