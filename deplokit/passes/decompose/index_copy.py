"""index_copy into a state buffer at a runtime position (a static KV cache's write):
cache[..., pos + offset + k, ...] = src[..., k, ...] along `dim`, in place (an Update node).

Capture (frontend/capture.py) makes this op only where the index is `pos + offset + arange(n)`
with `pos` a runtime scalar: the write lands at a position known at run time only."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, const, var
from .builder import Builder
from .registry import rule


@rule("index_copy")
def decompose_index_copy(op, b: Builder) -> str:
    target, pos, src = op.args
    dim, offset = op.attr("dim"), op.attr("offset", 0)
    tshape, sshape = b.shape(target), b.shape(src)
    if len(tshape) != len(sshape) or any(t != s for d, (t, s) in enumerate(zip(tshape, sshape)) if d != dim):
        raise UnsupportedOpError(f"index_copy (node {op.name}) writes {sshape} into {tshape} along dim {dim}; "
                                 "the other dims must match")
    at = as_affine(Gather(pos, (const(0),))) + offset
    index = tuple((at + (var(DIM_NAMES[d]) if sshape[d] != 1 else const(0))) if d == dim
                  else (var(DIM_NAMES[d]) if sshape[d] != 1 else const(0)) for d in range(len(tshape)))
    return b.update(target, src, index, op.name)
