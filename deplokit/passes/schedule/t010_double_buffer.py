"""010 double_buffer: promote K-outer Stages to BufferedStage (a ring of 2 to 4 buffers).

The stages at the head of a matmul's K-outer loop are refilled every iteration. With one
buffer, iteration ko's copy must wait until every thread is done reading iteration ko - 1's
slab (a barrier before the copy) and the compute must wait for the copy (a barrier after):
two barriers per iteration. With a ring of N buffers (`stages`), iteration ko fills slot
ko % N and computes from it: the readers of that slot ran in iteration ko - N, which ended
before iteration ko - 1's barrier, so the barrier before the copy goes (materialize), and
015 can later issue the copies of iteration ko + N - 1 during iteration ko's compute: N - 1
tiles in flight while one computes.

    for a2o in 0..4:  # reduce (K)
        x_smem = Stage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
  ->
        x_smem = BufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
  (stages=3:  x_smem = BufferedStage(x, ..., stages=3))

Only a K loop at the top of the tile (it runs once per block, so the ring starts at slot 0
every time it is entered), never more buffers than the loop has iterations. Flash
attention's causal key loop starts at the block's diagonal tile (a StridedLoop whose start
is an index of the block): its ring numbers the iterations from that start (j = var -
start fills slot j % N), and its trip count, different in every block, is at most the
number of key tiles. The ring may
take more than the 48 KiB a block declares statically, up to the target's dynamic shared
memory per block (the kernel then carves it from dynamic shared memory: k002); a ring that
does not fit keeps fewer stages (the trace says so). The default: 4 stages, or 3, when the
K loop runs at least 4 times as many iterations (the prologue fills N - 1 tiles before the
first compute) and the ring leaves room for two blocks per SM; else 2."""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Stage
from ..flash.flash_stage import key_loop_skip
from ..record import KernelPass, Knob, Noted, PassContext, Skip, flag_knob
from ..stage_geometry import head_stages, k_outer_loops, rewrite_k_heads, smem_bytes, stage_smem_budget, trips
from .grid_plan import ring_stages

DESCRIPTION = "promote K-outer Stages to BufferedStage (a ring of 2 to 4 buffers)"


def _default_stages(kernel, target) -> int:
    tile = kernel.tile()
    heads = [(s, lp) for lp in k_outer_loops(tile, kernel.flash is not None) for s in head_stages(lp) if s.buffers == 1]
    if not heads:
        return 2
    extent = min(trips(tile, lp) for _, lp in heads)
    one = sum(s.element_bytes * _elements(s) for s, _ in heads)
    # two resident blocks per SM at least: a deeper ring is not worth half the occupancy
    room = min(stage_smem_budget(target), target.smem_per_sm // 2 - 1024 if target.smem_per_sm else 0)
    return ring_stages(extent, lambda n: smem_bytes(tile) + (n - 1) * one <= room)


KNOBS = (flag_knob("enable", "buffer the stages at the head of a matmul K-outer loop in a ring", "double buffering"),
         Knob("stages", (2, 3, 4), _default_stages,
              "buffers of the ring at the head of a matmul K-outer loop (015 prefetches stages - 1 tiles)"))


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    loops = k_outer_loops(tile, kernel.flash is not None)
    if not loops:
        return Skip(key_loop_skip(kernel) or "no matmul K-outer loop")
    todo = [(s, lp) for lp in loops for s in head_stages(lp) if s.buffers == 1]
    if not todo:
        if any(head_stages(lp) for lp in loops):
            return Skip("the K-outer loop's stages are already double buffered")
        return Skip("nothing is staged at the head of the K-outer loop")
    if all(trips(tile, lp) < 2 for _, lp in todo):
        return Skip("the K-outer loop runs once: nothing to overlap")
    want = pctx.knobs["stages"]
    limit = stage_smem_budget(pctx.target)
    base = smem_bytes(tile)
    stages: dict[str, int] = {}          # K loop variable -> buffers of its ring
    notes = []
    for lp in loops:
        one = sum(s.element_bytes * _elements(s) for s in head_stages(lp) if s.buffers == 1)
        most = trips(tile, lp)
        n = min(want, most)
        while n >= 2 and base + (n - 1) * one > limit:
            n -= 1
        if n >= 2 and n < min(want, most):
            notes.append(f"K loop {lp.var}: {n} stages, not {want}: {want} buffers need "
                         f"{base + (want - 1) * one} bytes of shared memory, more than the {limit} a block "
                         f"may use on {pctx.target.name}")
        elif n >= 2 and n < want:
            notes.append(f"K loop {lp.var}: {n} stages, not {want}: the loop runs {most} times")
        if n >= 2:
            stages[lp.var] = n
            base += (n - 1) * one
    if not stages:
        need = smem_bytes(tile) + sum(s.element_bytes * _elements(s) for s, _ in todo)
        return Skip(f"two buffers need {need} bytes of "
                    f"shared memory, more than the {limit} bytes a block may use on {pctx.target.name}")

    def promote(s: Stage, loop) -> Stage:
        n = stages.get(loop.var, 1)
        return dataclasses.replace(s, buffers=n) if n >= 2 and s.buffers == 1 else s

    out = rewrite_k_heads(kernel, promote)
    return Noted(out, tuple(notes)) if notes else out


def _elements(s: Stage) -> int:
    n = s.slab[-1].extent + s.pad
    for ax in s.slab[:-1]:
        n *= ax.extent
    return n


PASS = KernelPass("010_double_buffer", "tile", DESCRIPTION, apply, KNOBS, flash_aware=True)
