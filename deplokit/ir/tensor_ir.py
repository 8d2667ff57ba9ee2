"""Tensor IR: three primitives with explicit broadcasts.

    bias_bc = bias[j] -> (16, 64) float32                  IndexMap
    prod = multiply(add_bc, w_bc) -> (16, 64, 16) float32  Elementwise
    red = sum(prod, axis=-2) -> (16, 1, 16) float32        Reduction

Every operand of an Elementwise has the node's own shape; an IndexMap is the only way to
move, broadcast, slice or gather elements; a Reduction keeps the reduced axes as size 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..display import Displayable
from .index import DIM_NAMES, Affine, gathers
from .ops import OPS, ops_of_arity
from .types import Buffer, TensorType, format_header, format_scalar

# the elementwise primitives, by arity (ir/ops.py)
UNARY_OPS, BINARY_OPS, TERNARY_OPS = ops_of_arity(1), ops_of_arity(2), ops_of_arity(3)
ELEMENTWISE_OPS = UNARY_OPS + BINARY_OPS + TERNARY_OPS
# Ops whose result is float32 whatever their operands (torch: exp of an int64 tensor is float).
FLOAT_RESULT_OPS = tuple(name for name, op in OPS.items() if op.result == "float")
# A change of storage type, half <-> float32 (ir/ops.py): the only op whose operand or result
# may be a half dtype.
CONVERT_OP = "convert"
# A float32 matmul operand rounded to TF32 where precision="tf32" (ir/ops.py).
TF32_OP = "round_tf32"
# Ops that change how a value is stored, not what is computed: free in the fusion guard's count
# (a load's conversion, an mma operand's rounding), never a reason to store an intermediate.
STORAGE_OPS = (CONVERT_OP, TF32_OP)
COMPARISON_OPS = ("greater", "less", "greater_equal", "less_equal", "equal", "not_equal",
                  "logical_and", "logical_or", "logical_not")
REDUCTION_OPS = ("sum", "max", "min")
# The value an accumulator starts from.
REDUCTION_IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}
_INT_LIMITS = {"int64": (-2 ** 63, 2 ** 63 - 1), "int32": (-2 ** 31, 2 ** 31 - 1), "bool": (0, 1)}


def reduction_identity(op: str, dtype: str) -> float | int:
    """The identity of reduction `op` in `dtype`: +-inf for floats, the extreme values of an
    integer type (an int64 max starts from -2**63, never from a float)."""
    if dtype not in _INT_LIMITS:
        return REDUCTION_IDENTITY[op]
    lo, hi = _INT_LIMITS[dtype]
    return {"sum": 0, "max": lo, "min": hi}[op]
# The elementwise op that folds one value into an accumulator.
REDUCTION_COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


@dataclass(frozen=True)
class Axis:
    """The position along one axis of the node's own shape (an iota), e.g. for causal masks."""
    dim: int

    def __str__(self) -> str:
        return DIM_NAMES[self.dim]


Operand = Union[str, float, Axis]   # a tensor name, a scalar constant, or an axis position


def format_operand(a: Operand) -> str:
    if isinstance(a, str):
        return a
    if isinstance(a, Axis):
        return str(a)
    return format_scalar(a)


@dataclass(frozen=True)
class Elementwise:
    name: str
    op: str
    args: tuple[Operand, ...]
    type: TensorType

    def inputs(self) -> tuple[str, ...]:
        return tuple(a for a in self.args if isinstance(a, str))

    def __str__(self) -> str:
        return f"{self.name} = {self.op}({', '.join(format_operand(a) for a in self.args)}) -> {self.type}"


@dataclass(frozen=True)
class Reduction:
    name: str
    op: str
    src: str
    axes: tuple[int, ...]      # non-negative, sorted
    type: TensorType           # the source shape with the reduced axes set to 1

    def inputs(self) -> tuple[str, ...]:
        return (self.src,)

    def __str__(self) -> str:
        rank = self.type.rank
        neg = [a - rank for a in self.axes]
        axis = str(neg[0]) if len(neg) == 1 else "(" + ", ".join(str(a) for a in neg) + ")"
        return f"{self.name} = {self.op}({self.src}, axis={axis}) -> {self.type}"


@dataclass(frozen=True)
class IndexMap:
    """out[i, j, ...] = src[index(i, j, ...)]; with `pad`, out-of-range reads give `pad`."""
    name: str
    src: str
    index: tuple[Affine, ...]      # over the variables DIM_NAMES[:rank of out]
    type: TensorType
    pad: float | None = None

    def inputs(self) -> tuple[str, ...]:
        names = [self.src]
        for e in self.index:
            names.extend(g.tensor for g in gathers(e) if g.tensor not in names)
        return tuple(names)

    def __str__(self) -> str:
        idx = ", ".join(_index_entry(e, self._src_extent(k)) for k, e in enumerate(self.index))
        pad = "" if self.pad is None else f" pad {format_scalar(self.pad)}"
        return f"{self.name} = {self.src}[{idx}]{pad} -> {self.type}"

    def _src_extent(self, k: int) -> int | None:
        return self.src_shape[k] if self.src_shape else None

    # The source's shape is not needed for meaning, only to print size-1 axes as `na`;
    # the decomposer fills it in. Excluded from equality and hashing.
    src_shape: tuple[int, ...] = field(default=(), compare=False, repr=False)


def _index_entry(e: Affine, extent: int | None) -> str:
    if extent == 1 and e.is_const and e.const == 0:
        return "na"
    return str(e)


@dataclass(frozen=True)
class Update:
    """An in-place write into a state buffer (a KV cache): the result equals `target` except
    that, for every element e of `src` (variables DIM_NAMES[:rank of src]), result[index(e)] =
    src[e]. Its storage is the target's: a kernel writes only src's elements, so a write at a
    runtime position (`index` reads a runtime scalar, `pos[0]`) changes one row of the cache.

        kv_cache0_1 = kv_cache0 with [i, j, pos[0] + k, l] = add_5 -> (1, 2, 32, 16) float32
    """
    name: str
    target: str
    src: str
    index: tuple[Affine, ...]       # over src's dims, into target's
    type: TensorType                # the target's type
    src_shape: tuple[int, ...] = ()

    def inputs(self) -> tuple[str, ...]:
        names = [self.src]
        for e in self.index:
            names.extend(g.tensor for g in gathers(e) if g.tensor not in names)
        return tuple(names)

    def __str__(self) -> str:
        return f"{self.name} = {self.target} with [{', '.join(str(e) for e in self.index)}] = {self.src} -> {self.type}"


TensorNode = Union[Elementwise, Reduction, IndexMap, Update]


def written_buffer(node: TensorNode, outputs: tuple[str, ...]) -> Buffer:
    """The buffer a kernel computing `node` writes: an output or a temporary, in the state's
    own storage for an Update."""
    return Buffer(node.name, node.type, "output" if node.name in outputs else "temp",
                  node.target if isinstance(node, Update) else "")


@dataclass(frozen=True)
class TensorProgram(Displayable):
    buffers: tuple[Buffer, ...]
    nodes: tuple[TensorNode, ...]
    outputs: tuple[str, ...]
    # Nodes that hold a Torch-IR op's result (named like it): where fusion prefers to cut.
    op_results: frozenset[str] = frozenset()
    # Half values stored between kernels, where eager stores them: the half ops a contraction
    # reads (decompose.half_contraction_operands), so a tensor core reads them raw.
    stored_half: frozenset[str] = frozenset()

    def types(self) -> dict[str, TensorType]:
        out = {b.name: b.type for b in self.buffers}
        out.update((n.name, n.type) for n in self.nodes)
        return out

    def node(self, name: str) -> TensorNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def header(self) -> str:
        return format_header(self.buffers, self.outputs)

    def __str__(self) -> str:
        return "\n".join(str(n) for n in self.nodes)
