"""010 double_buffer: promote K-outer Stages to BufferedStage (ping-pong).

The stages at the head of a matmul's K-outer loop are refilled every iteration. With one
buffer, iteration ko's copy must wait until every thread is done reading iteration ko - 1's
slab (a barrier before the copy) and the compute must wait for the copy (a barrier after):
two barriers per iteration. With two buffers, iteration ko fills buffer ko % 2 and computes
from it: the readers of that buffer ran in iteration ko - 2, which ended before iteration
ko - 1's barrier, so the barrier before the copy goes (materialize), and 015 can later run
the copy of iteration ko + 1 during iteration ko's compute.

    for a2o in 0..4:  # reduce (K)
        x_smem = Stage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
  ->
        x_smem = BufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))

Only a K loop at the top of the tile (it runs once per block, so the buffer parity starts
at 0 every time it is entered) whose stages fit twice in static shared memory."""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Stage
from ..stage_geometry import head_stages, k_outer_loops, rewrite_k_heads, smem_bytes
from ..record import KernelPass, PassContext, Skip, flag_knob

DESCRIPTION = "promote K-outer Stages to BufferedStage (ping-pong)"


KNOBS = (flag_knob("enable", "double-buffer the stages at the head of a matmul K-outer loop", "double buffering"),)


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    loops = k_outer_loops(tile)
    if not loops:
        return Skip("no matmul K-outer loop")
    todo = [(s, lp) for lp in loops for s in head_stages(lp) if s.buffers == 1]
    if not todo:
        if any(head_stages(lp) for lp in loops):
            return Skip("the K-outer loop's stages are already double buffered")
        return Skip("nothing is staged at the head of the K-outer loop")
    if all(lp.extent < 2 for _, lp in todo):
        return Skip("the K-outer loop runs once: nothing to overlap")
    extra = sum(4 * _elements(s) for s, lp in todo if lp.extent >= 2)
    need = smem_bytes(tile) + extra
    if need > pctx.target.static_smem_per_block:
        return Skip(f"two buffers need {need} bytes of shared memory, more than the "
                    f"{pctx.target.static_smem_per_block} bytes a "
                    f"block may declare statically")

    def promote(s: Stage, loop) -> Stage:
        return dataclasses.replace(s, buffers=2) if loop.extent >= 2 else s

    return rewrite_k_heads(kernel, promote)


def _elements(s: Stage) -> int:
    n = s.slab[-1].extent + s.pad
    for ax in s.slab[:-1]:
        n *= ax.extent
    return n


PASS = KernelPass("010_double_buffer", "tile", DESCRIPTION, apply, KNOBS)
