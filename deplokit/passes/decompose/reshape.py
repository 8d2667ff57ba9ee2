"""view / reshape / flatten: the same elements in row-major order under a new shape.

Index = unflatten(flatten(out index)); `//` and `%` that the ranges make redundant vanish,
so merging or splitting whole axes prints as plain affine indices.
"""
from __future__ import annotations

from .builder import Builder, resolve_shape
from .registry import rule


@rule("view", "reshape", "flatten", "unflatten")
def decompose_reshape(op, b: Builder) -> str:
    x = op.args[0]
    if op.op == "flatten":
        shape = b.shape(x)
        rank = len(shape)
        if rank == 0:
            return b.reshape(x, (1,), "view")
        start, end = op.attr("start_dim", 0) % rank, op.attr("end_dim", -1) % rank
        merged = 1
        for e in shape[start:end + 1]:
            merged *= e
        target = shape[:start] + (merged,) + shape[end + 1:]
    elif op.op == "unflatten":   # one axis split into `sizes` (one may be -1)
        shape = b.shape(x)
        dim = op.attr("dim") % len(shape)
        target = shape[:dim] + resolve_shape(op.attr("sizes"), (shape[dim],)) + shape[dim + 1:]
    else:
        target = tuple(op.attr("shape"))
    return b.reshape(x, target, "view")
