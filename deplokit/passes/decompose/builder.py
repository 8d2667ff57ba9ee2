"""The helper every decomposition rule writes Tensor IR through.

It makes broadcasts explicit (an IndexMap named `<src>_bc` in front of any operand whose
shape differs from the result), gives every new tensor a stable, readable name, and keeps
the nodes in creation order.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import UnsupportedOpError
from ...ir.c_names import c_safe
from ...ir.index import DIM_NAMES, Affine, const, floordiv, mod, var
from ...ir.tensor_ir import (
    COMPARISON_OPS,
    FLOAT_RESULT_OPS,
    Axis,
    Elementwise,
    IndexMap,
    Operand,
    Reduction,
    TensorNode,
    Update,
)
from ...ir.types import TensorType


class Builder:
    def __init__(self, types: dict[str, TensorType], reserved: set[str] = frozenset(),
                 precision: str = "float32"):
        self._types = dict(types)
        self.precision = precision      # "tf32": matmul operands are rounded to TF32 (matmul.contract)
        # Torch-IR op names stay free for `rename_last`, so a decomposed op keeps its name.
        self._taken = set(types) | set(reserved)
        self.nodes: list[TensorNode] = []
        # what rules may reuse or rely on across ops (decompose/grouped_mm.py): values several
        # ops share (one layer's expert layout), tensors proven counts or running counts
        self.shared: dict = {}
        self.counts: set[str] = set()
        self.running_counts: set[str] = set()

    # -- names and types --------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new tensor name from `hint`, unused and one C takes (every tensor may become a
        kernel parameter or name its kernel: `exp` would clash with CUDA's math `exp`)."""
        name = c_safe(hint, self._taken)
        self._taken.add(name)
        return name

    def type(self, name: str) -> TensorType:
        return self._types[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._types[name].shape

    def _add(self, node: TensorNode) -> str:
        self.nodes.append(node)
        self._types[node.name] = node.type
        return node.name

    def rename_last(self, old: str, new: str, since: int) -> bool:
        """Give the node `old` the name `new` if it is the last node and was made at or after
        node number `since` (by the rule being applied): only then can nothing else refer to it.
        A no-op rule (clone, contiguous, same-shape reshape) returns an older node that
        earlier ops' results still name, and that one must keep its name."""
        if (len(self.nodes) <= since or self.nodes[-1].name != old or new in self._types):
            return False
        self.nodes[-1] = replace(self.nodes[-1], name=new)
        self._types[new] = self._types.pop(old)
        self._taken.add(new)
        return True

    # -- the three primitives -----------------------------------------------------------
    def index_map(self, src: str, index: tuple[Affine, ...], shape: tuple[int, ...],
                  hint: str, pad: float | None = None) -> str:
        src_type = self.type(src)
        assert len(index) == src_type.rank, (src, index)
        return self._add(IndexMap(self.fresh(hint), src, tuple(index), TensorType(tuple(shape), src_type.dtype),
                                  pad, src_type.shape))

    def update(self, target: str, src: str, index: tuple[Affine, ...], hint: str) -> str:
        """target with src written at index (an in-place write into a state buffer)."""
        assert len(index) == self.type(target).rank, (target, index)
        return self._add(Update(self.fresh(hint), target, src, tuple(index), self.type(target), self.shape(src)))

    def elementwise(self, op: str, *args: Operand, hint: str | None = None,
                    shape: tuple[int, ...] | None = None, dtype: str | None = None) -> str:
        tensors = [a for a in args if isinstance(a, str)]
        if shape is None:
            shape = broadcast_shapes(*[self.shape(a) for a in tensors])
        if dtype is None:   # given only where the op changes type (trunc: float to int)
            dtype = "bool" if op in COMPARISON_OPS else self._result_dtype(op, args[1:] if op == "where" else args)
        # Integer arithmetic keeps integer scalars (ids + 1 stays int64, as in torch), and so
        # does a comparison of integers (ids > 2**60 + 1 compares int64s, not floats).
        operands = self._result_dtype(op, args) if op in COMPARISON_OPS else dtype
        keep_int = operands in ("int64", "int32")
        args = tuple(self.broadcast_to(a, shape) if isinstance(a, str) else _scalar(a, keep_int) for a in args)
        return self._add(Elementwise(self.fresh(hint or op), op, args, TensorType(tuple(shape), dtype)))

    def _result_dtype(self, op: str, values) -> str:
        """torch's type promotion, for the operands the result is made of: float32 wins;
        integers (and bools with integer scalars) stay integer, except under true division."""
        dtypes = {self.type(a).dtype for a in values if isinstance(a, str)}
        scalars = [a for a in values if not isinstance(a, (str, Axis))]
        if "float32" in dtypes or op in FLOAT_RESULT_OPS or any(isinstance(a, float) for a in scalars):
            return "float32"
        if not dtypes and not scalars:
            return "float32"
        ints = dtypes - {"bool"}
        if ints:
            return "int64" if "int64" in ints else ints.pop()
        if scalars and not all(isinstance(a, bool) for a in scalars):
            return "int64"
        return "bool" if dtypes or scalars else "float32"

    def reduce(self, op: str, src: str, axes, keepdim: bool = True, hint: str = "red") -> str:
        src_type = self.type(src)
        axes = normalize_axes(axes, src_type.rank)
        if not axes:
            return src
        shape = tuple(1 if d in axes else s for d, s in enumerate(src_type.shape))
        red = self._add(Reduction(self.fresh(hint), op, src, axes, TensorType(shape, src_type.dtype)))
        if keepdim:
            return red
        return self.squeeze(red, axes)

    # -- index maps users ask for by name ---------------------------------------------------
    def broadcast_to(self, src: str, shape: tuple[int, ...]) -> str:
        s = self.shape(src)
        if s == tuple(shape):
            return src
        if len(s) > len(shape):
            raise UnsupportedOpError(f"cannot broadcast {src} of shape {s} to {tuple(shape)}")
        lead = len(shape) - len(s)
        index = []
        for p, extent in enumerate(s):
            q = p + lead
            if extent == shape[q]:
                index.append(var(DIM_NAMES[q]))
            elif extent == 1:
                index.append(const(0))
            else:
                raise UnsupportedOpError(f"cannot broadcast {src} of shape {s} to {tuple(shape)}")
        return self.index_map(src, tuple(index), shape, f"{src}_bc")

    def squeeze(self, src: str, axes: tuple[int, ...], hint: str | None = None) -> str:
        s = self.shape(src)
        out_shape = tuple(e for d, e in enumerate(s) if d not in axes)
        index, q = [], 0
        for d in range(len(s)):
            if d in axes:
                index.append(const(0))
            else:
                index.append(var(DIM_NAMES[q]))
                q += 1
        return self.index_map(src, tuple(index), out_shape, hint or f"{src}_sq")

    def reshape(self, src: str, shape: tuple[int, ...], hint: str) -> str:
        s = self.shape(src)
        shape = resolve_shape(shape, s)
        if shape == s:
            return src
        ranges = {DIM_NAMES[q]: e for q, e in enumerate(shape)}
        flat = const(0)
        stride = 1
        for q in reversed(range(len(shape))):
            if shape[q] != 1:
                flat = var(DIM_NAMES[q]) * stride + flat
            stride *= shape[q]
        index, stride = [], 1
        strides = []
        for e in reversed(s):
            strides.append(stride)
            stride *= e
        strides.reverse()
        for p, e in enumerate(s):
            index.append(const(0) if e == 1 else mod(floordiv(flat, strides[p], ranges), e, ranges))
        return self.index_map(src, tuple(index), shape, hint)

    def permute(self, src: str, dims: tuple[int, ...], hint: str) -> str:
        s = self.shape(src)
        dims = tuple(d % len(s) for d in dims)
        if dims == tuple(range(len(s))):
            return src
        out_shape = tuple(s[d] for d in dims)
        index = [None] * len(s)
        for q, d in enumerate(dims):
            index[d] = var(DIM_NAMES[q]) if s[d] != 1 else const(0)
        return self.index_map(src, tuple(index), out_shape, hint)


def _scalar(a, keep_int: bool = False):
    if isinstance(a, Axis):
        return a
    if keep_int and isinstance(a, int):
        return int(a)
    return float(a)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for p, e in enumerate(s):
            q = p + rank - len(s)
            if e != 1:
                if out[q] not in (1, e):
                    raise UnsupportedOpError(f"shapes {', '.join(str(x) for x in shapes)} do not broadcast")
                out[q] = e
    return tuple(out)


def trailing_axes(shape: tuple[int, ...], normalized_shape) -> tuple[tuple[int, ...], int]:
    """The axes a norm normalises over (the trailing len(normalized_shape)) and their size."""
    axes = tuple(range(len(shape) - len(normalized_shape), len(shape)))
    n = 1
    for a in axes:
        n *= shape[a]
    return axes, n


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    if axes is None or axes == ():
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({a % rank for a in axes})) if rank else ()


def resolve_shape(shape, src_shape) -> tuple[int, ...]:
    """A view's target shape with any -1 worked out."""
    shape = list(shape)
    numel = 1
    for e in src_shape:
        numel *= e
    if -1 in shape:
        known = 1
        for e in shape:
            if e != -1:
                known *= e
        shape[shape.index(-1)] = numel // known if known else 0
    return tuple(int(e) for e in shape)
