"""cat: each part read through a padded IndexMap (zero outside its window), then added.

Keeping cat inside the three primitives costs one add per part; the fused kernel never
builds the padded copies.
"""
from __future__ import annotations

from ...ir.index import DIM_NAMES, var
from .builder import Builder
from .registry import rule


@rule("cat")
def decompose_cat(op, b: Builder) -> str:
    parts = [p for p in op.args if b.shape(p)[op.attr("dim") % len(b.shape(p))] > 0]
    shape = b.shape(parts[0])
    dim = op.attr("dim") % len(shape)
    total = sum(b.shape(p)[dim] for p in parts)
    out = shape[:dim] + (total,) + shape[dim + 1:]
    if len(parts) == 1:
        return parts[0]
    padded, offset = [], 0
    for p in parts:
        index = tuple(var(DIM_NAMES[q]) - offset if q == dim else var(DIM_NAMES[q]) for q in range(len(shape)))
        padded.append(b.index_map(p, index, out, f"{p}_pad", pad=0.0))
        offset += b.shape(p)[dim]
    acc = padded[0]
    for p in padded[1:]:
        acc = b.elementwise("add", acc, p, hint="cat")
    return acc
