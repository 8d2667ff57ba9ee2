"""015 pipeline_k_outer: rotate the K-outer loop into prologue / steady state / epilogue.

With double-buffered asynchronous stages (cp.async or TMA) the copy of K tile ko + 1 can
be in flight while tile ko computes. The pass marks the stages `prefetch=1`; the
materialiser rotates the loop:

    prologue       (before the loop)  [mbarrier init; barrier]; issue tile 0 into buffer 0
    steady state   for ko in 0..n:    wait for tile ko (cp.async.wait 0 / mbarrier wait)
                                      barrier: tile ko is visible to every thread, and every
                                               thread is done reading buffer (ko + 1) % 2
                                      if ko + 1 < n: issue tile ko + 1 into buffer (ko + 1) % 2
                                      compute tile ko from buffer ko % 2
    epilogue       the last iteration issues nothing and computes the last tile

one barrier per iteration; each copy has a whole tile's compute to land.

    for a2o in 0..4:  # reduce (K)
        x_smem = AsyncBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
  ->
        x_smem = AsyncBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1), prefetch=1)

It applies to a K-outer loop whose head stages are all double buffered and asynchronous: a
synchronous copy is made by the threads that compute, so it cannot run ahead of them."""
from __future__ import annotations

import dataclasses

from ..stage_geometry import head_stages, k_outer_loops, rewrite_k_heads
from .knobs import Knob, Skip

DESCRIPTION = "rotate the K-outer loop into prologue / steady state / epilogue (cp.async + TMA)"


def _default_enable(kernel, target) -> bool:
    return True


KNOBS = (Knob("enable", (True, False), _default_enable,
              "issue the copies of K tile ko + 1 during tile ko (software pipeline)"),)


def apply(kernel, target, knobs):
    if not knobs["enable"]:
        return Skip("pipelining disabled by the knob")
    tile = kernel.tile()
    loops = k_outer_loops(tile)
    if not loops:
        return Skip("no matmul K-outer loop")
    chosen, reasons = set(), []
    for lp in loops:
        heads = head_stages(lp)
        if not heads:
            reasons.append(f"nothing is staged at the head of K loop {lp.var}")
            continue
        if all(s.prefetch for s in heads):
            reasons.append(f"K loop {lp.var} is already pipelined")
            continue
        blocking = [s for s in heads if s.buffers != 2 or s.copy not in ("async", "tma")]
        if blocking:
            s = blocking[0]
            what = "single-buffered" if s.buffers != 2 else "synchronous"
            reasons.append(f"{s.name} at the head of K loop {lp.var} is {what}: its copy cannot run ahead "
                           f"of the compute")
            continue
        if lp.extent < 2:
            reasons.append(f"K loop {lp.var} runs once")
            continue
        chosen.add(lp.var)
    if not chosen:
        return Skip("; ".join(reasons))
    return rewrite_k_heads(kernel, lambda s, lp: dataclasses.replace(s, prefetch=1) if lp.var in chosen else s)
