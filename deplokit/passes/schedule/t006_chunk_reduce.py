"""006 chunk_reduce: chunk a row reduction whose row does not fit in shared memory.

Not built yet for rows past static shared memory; a row that fits needs no chunks."""
from __future__ import annotations

from ...ir.tile_ir import StridedLoop, walk
from .knobs import Skip

DESCRIPTION = "chunk non-matmul reduces so their Loads fit in shared memory"
STATIC_SMEM_FLOATS = 48 * 1024 // 4


def apply(kernel, target, knobs):
    strided = [s for s, _ in walk(kernel.tile().body) if isinstance(s, StridedLoop) and s.kind == "reduce"]
    if not strided:
        return Skip("no cooperative row reduction")
    longest = max(s.stop for s in strided)
    if longest <= STATIC_SMEM_FLOATS:
        return Skip(f"rows of {longest} floats fit in shared memory whole")
    return Skip(f"rows of {longest} floats exceed shared memory; chunking is not implemented yet, "
                "so the row is read from global memory")
