"""006 chunk_reduce: chunk a row reduction whose row does not fit in shared memory.

A row kernel reads its row once per phase (RMSNorm: twice, softmax: three times); staging
the row (007) turns all but the first read into shared-memory reads. When the row is
longer than the shared-memory budget, every phase loop is split at the same chunk
boundary C: the head [0, C) fits and is staged once for all phases, the tail [C, E) is
read from global memory in each phase.

    StridedLoop(a1 = a3; < 16384; += 256)
 -> StridedLoop(a1 = a3; < 12288; += 256)
    StridedLoop(a1c = a3 + 12288; < 16384; += 256)
"""
from __future__ import annotations

from ...ir.index import free_vars, var
from ...ir.loop_ir import Load
from ...ir.substitute import substitute_body
from ...ir.tile_ir import StridedLoop, Tile, TileKernel, walk
from ...target import STATIC_SMEM_PER_BLOCK
from ..record import KernelPass, Knob, PassContext, Skip, replace_tile
from .knobs import combine_smem, local_smem

DESCRIPTION = "chunk non-matmul reduces so their Loads fit in shared memory"


def _default_budget(kernel, target) -> int:
    return target.static_smem_per_block


KNOBS = (Knob("smem_budget", (STATIC_SMEM_PER_BLOCK // 3, 2 * STATIC_SMEM_PER_BLOCK // 3, STATIC_SMEM_PER_BLOCK),
              _default_budget,
              "bytes of shared memory the staged row heads may use"),)


def _hot_rows(phases) -> dict[str, int]:
    """Tensors whose row is read along the phase variable in at least two phases."""
    reads: dict[str, set] = {}
    for i, loop in enumerate(phases):
        for s, _ in walk(loop.body):
            if isinstance(s, Load) and s.pad is None and any(loop.var in free_vars(e) for e in s.index):
                reads.setdefault(s.tensor, set()).add(i)
    return {t: len(p) for t, p in reads.items() if len(p) >= 2}


def apply(kernel: TileKernel, pctx: PassContext):
    tile = kernel.tile()
    phases = [s for s in tile.body if isinstance(s, StridedLoop)]
    if not phases:
        return Skip("no cooperative row reduction")
    extent = max(p.stop for p in phases)
    if any(p.stop != extent or p.start.const for p in phases):
        return Skip("phases of different lengths")
    hot = {t: n for t, n in _hot_rows(phases).items() if t not in kernel.local_names()}   # locals: on chip
    if not hot:
        return Skip("no row is read in two phases")
    budget = pctx.knobs["smem_budget"] - combine_smem(tile) - local_smem(kernel)
    if 4 * extent * len(hot) <= budget:
        return Skip(f"rows of {extent} floats fit in shared memory whole")
    lanes = phases[0].step
    chunk = (budget // (4 * len(hot))) // lanes * lanes
    if chunk < lanes:
        return Skip(f"not even one float per lane of {', '.join(hot)} fits in {budget} bytes")
    body = []
    for s in tile.body:
        if isinstance(s, StridedLoop):
            tail_var = f"{s.var}c"
            tail = StridedLoop(tail_var, s.start + chunk, s.stop, s.step, s.kind,
                               substitute_body(s.body, {s.var: var(tail_var)}, {}), s.role, s.unroll)
            body += [StridedLoop(s.var, s.start, chunk, s.step, s.kind, s.body, s.role, s.unroll), tail]
        else:
            body.append(s)
    new_tile = Tile(tile.axes, tuple(body))
    return replace_tile(kernel, new_tile)


PASS = KernelPass("006_chunk_reduce", "tile", DESCRIPTION, apply, KNOBS)
