"""embedding: out[..., e] = weight[ids[...], e], a gather through an integer index."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, Gather, as_affine, var
from .builder import Builder
from .registry import rule


@rule("embedding")
def decompose_embedding(op, b: Builder) -> str:
    weight, ids = op.args[0], op.args[1]
    id_shape = b.shape(ids)
    E = b.shape(weight)[1]
    row = as_affine(Gather(ids, tuple(var(DIM_NAMES[p]) for p in range(len(id_shape)))))
    return b.index_map(weight, (row, var(DIM_NAMES[len(id_shape)])), id_shape + (E,), "emb")
