"""index (x[i0, :, i2] with integer tensors) and gather (torch.gather): reads through a
Gather in the index, as embedding does. Negative indices count from the end, as in torch."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, const, var
from .builder import Builder, broadcast_shapes
from .registry import rule


def wrap_negative(b: Builder, idx: str, extent: int) -> str:
    """idx, with -1 meaning extent - 1 (torch's reading of a negative index)."""
    if b.type(idx).dtype not in ("int64", "int32"):
        raise UnsupportedOpError(f"index tensor {idx} has dtype {b.type(idx).dtype}; deplokit indexes with "
                                 "integer tensors (a bool mask index has a data-dependent shape)")
    neg = b.elementwise("less", idx, 0, hint=f"{idx}_neg")
    return b.elementwise("where", neg, b.elementwise("add", idx, extent, hint=f"{idx}_wrap"), idx,
                         hint=f"{idx}_pos")


def _read(idx: str, shape: tuple[int, ...], out_dims: tuple[int, ...], b: Builder):
    """Gather of idx (broadcast to `shape`, whose axes are the output axes `out_dims`)."""
    s = b.shape(idx)
    lead = len(shape) - len(s)
    entries = tuple(const(0) if e == 1 and shape[lead + j] != 1 else var(DIM_NAMES[out_dims[lead + j]])
                    for j, e in enumerate(s))
    return as_affine(Gather(idx, entries))


@rule("index")
def decompose_index(op, b: Builder) -> str:
    """x[i0, :, i2]: the index tensors broadcast together to one block of output axes, in
    place of the axes they index when those are adjacent, else first (torch's rule)."""
    x, indices = op.args[0], op.args[1:]
    shape = b.shape(x)
    dims = tuple(d % len(shape) for d in op.attr("dims"))      # index_select(-1, idx)
    bshape = broadcast_shapes(*[b.shape(i) for i in indices])
    start = dims[0] if dims == tuple(range(dims[0], dims[0] + len(dims))) else 0
    kept = [p for p in range(len(shape)) if p not in dims]
    out = tuple(shape[p] for p in kept[:start]) + bshape + tuple(shape[p] for p in kept[start:])
    kept_at = list(range(start)) + list(range(start + len(bshape), len(out)))
    entry = {p: var(DIM_NAMES[q]) if shape[p] != 1 else const(0) for p, q in zip(kept, kept_at)}
    block = tuple(range(start, start + len(bshape)))
    for d, idx in zip(dims, indices):
        entry[d] = _read(wrap_negative(b, idx, shape[d]), bshape, block, b)
    return b.index_map(x, tuple(entry[p] for p in range(len(shape))), out, "index")


@rule("gather")
def decompose_gather(op, b: Builder) -> str:
    """out[i, j, k] = x[i, idx[i, j, k], k] for dim 1 (idx may be smaller than x elsewhere)."""
    x, idx = op.args[0], op.args[1]
    shape, out = b.shape(x), b.shape(idx)
    dim = op.attr("dim") % len(shape)
    idx = wrap_negative(b, idx, shape[dim])
    row = as_affine(Gather(idx, tuple(var(DIM_NAMES[p]) for p in range(len(out)))))
    index = tuple(row if p == dim else (var(DIM_NAMES[p]) if shape[p] != 1 else const(0)) for p in range(len(shape)))
    return b.index_map(x, index, out, "gather")
