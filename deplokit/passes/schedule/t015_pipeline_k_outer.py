"""015 pipeline_k_outer: rotate the K-outer loop into prologue / steady state / epilogue.

With a ring of N asynchronous stages (010's stages; cp.async or TMA) the copies of K tiles
ko + 1 .. ko + N - 1 can be in flight while tile ko computes. The pass marks the stages
`prefetch=N-1` and moves the loop's AsyncWait (011 / 013 put it after the stages) before
them, so that the body reads in execution order: wait for tile ko; issue the copies of tile
ko + N - 1; compute tile ko. The materialiser rotates the loop:

    prologue       (before the loop)  [mbarrier init; barrier]; issue tiles 0 .. N - 2 into
                                      slots 0 .. N - 2 (one cp.async group each)
    steady state   for ko in 0..n:
      AsyncWait                       wait for tile ko (cp.async.wait_group N - 2: the N - 2
                                      newer groups may stay in flight / full[ko % N] parity
                                      (ko / N) & 1)
                                      barrier: tile ko is visible to every thread, and every
                                               thread is done reading slot (ko - 1) % N
                                      (TMA alone: no barrier; the producer waits empty[slot])
      prefetching stages              if ko + N - 1 < n: issue tile ko + N - 1 into slot
                                      (ko + N - 1) % N (cp.async: commit, even empty)
      the rest of the body            compute tile ko from slot ko % N
                                      (TMA alone: every thread arrives on empty[ko % N])
    epilogue       the last N - 1 iterations issue nothing and compute the last tiles

at most one barrier per iteration; each copy has N - 1 tiles' compute to land. A causal key
loop (from the block's diagonal tile: its start, and so its trip count n, is the block's)
counts iterations j = ko - start: the prologue issues tile j < N - 1 only where j < n (each
a cp.async group, committed even when empty), the waits use slot j % N and phase j / N.

    for a2o in 0..4:  # reduce (K)
        x_smem = AsyncBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
        AsyncWait(x_smem)
        for a2i in 0..16:  # reduce (K)
  ->
    for a2o in 0..4:  # reduce (K)
        AsyncWait(x_smem)
        x_smem = AsyncBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1), prefetch=1)
        for a2i in 0..16:  # reduce (K)

It applies to a K-outer loop whose head stages are all buffered (a ring of N >= 2) and
asynchronous: a synchronous copy is made by the threads that compute, so it cannot run
ahead of them.

Knob `warp_specialize` (off by default; the tuner tries it on wgmma kernels): where the ring
is TMA stages alone and the kernel multiplies with wgmma (008), the copies are issued by a
producer warpgroup of their own instead of an elected computing thread (a
producer/consumer schedule, recorded as the AsyncWait's `roles`: ir/warp_roles.py);
`wgmma_in_flight` 1 lets the consumers keep one wgmma group running across K tiles
(wgmma.wait_group 1, each slot released one tile later). The roles carry the register split
(setmaxnreg: the producer gives registers back, the consumers take them; register_split
decides it from the block's threads and the 64K-register file). passes/wgmma/warp_roles.py
lowers it."""
from __future__ import annotations

import dataclasses
import math

from ...ir.tile_ir import THREAD, AsyncWait, Stage, Tile
from ...ir.warp_roles import WarpRoles
from ..flash.flash_stage import key_loop_skip
from ..record import KernelPass, Knob, Noted, PassContext, Skip, flag_knob, replace_tile
from ..stage_geometry import head_length, head_stages, k_outer_loops, trips
from ..wgmma.warp_roles import register_split

DESCRIPTION = "rotate the K-outer loop into prologue / steady state / epilogue (cp.async + TMA)"


def _wgmma(kernel) -> bool:
    mma = getattr(kernel, "mma", None)
    return bool(mma is not None and mma.wgmma)


KNOBS = (flag_knob("enable", "issue the copies of K tile ko + stages - 1 during tile ko (software pipeline)",
                   "pipelining"),
         Knob("warp_specialize", (False, True), lambda k, t: False,
              "a wgmma kernel's TMA ring filled by a producer warpgroup of its own (producer/consumer "
              "schedule: full and empty mbarriers per slot), the computing warpgroups only multiply",
              searched=lambda k, t: (False, True) if _wgmma(k) else (False,)),
         Knob("wgmma_in_flight", (0, 1), lambda k, t: 1,
              "with warp_specialize: wgmma groups a consumer leaves running across K tiles "
              "(wgmma.wait_group N; a slot is released N tiles later)",
              searched=lambda k, t: (0, 1) if _wgmma(k) else (1,)))    # elsewhere: the default, unsearched


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    loops = k_outer_loops(tile, kernel.flash is not None)
    if not loops:
        return Skip(key_loop_skip(kernel) or "no matmul K-outer loop")
    chosen, reasons = set(), []
    for lp in loops:
        heads = head_stages(lp)
        if not heads:
            reasons.append(f"nothing is staged at the head of K loop {lp.var}")
            continue
        if all(s.prefetch for s in heads):
            reasons.append(f"K loop {lp.var} is already pipelined")
            continue
        blocking = [s for s in heads if s.buffers < 2 or s.copy not in ("async", "tma")]
        if blocking:
            s = blocking[0]
            what = "single-buffered" if s.buffers < 2 else "synchronous"
            reasons.append(f"{s.name} at the head of K loop {lp.var} is {what}: its copy cannot run ahead "
                           f"of the compute")
            continue
        if trips(tile, lp) < 2:
            reasons.append(f"K loop {lp.var} runs once")
            continue
        chosen.add(lp.var)
    if not chosen:
        return Skip("; ".join(reasons))
    tile = kernel.tile()
    rotate = {id(lp) for lp in loops if lp.var in chosen}
    roles, why = _roles(kernel, [lp for lp in loops if lp.var in chosen], pctx.knobs)
    body = tuple(_pipeline(s, roles) if id(s) in rotate else s for s in tile.body)
    new_tile = Tile(tile.axes, body)
    out = replace_tile(kernel, new_tile)
    if why:                      # asked for, not applicable: say why
        return Noted(out, why, {"warp_specialize": None, "wgmma_in_flight": None})
    return out


def _roles(kernel, loops, knobs) -> tuple[WarpRoles | None, str]:
    """The producer/consumer schedule the knobs ask for, or (None, why it does not apply)."""
    if not knobs.get("warp_specialize"):
        return None, ""
    if not _wgmma(kernel):
        return None, "warp_specialize: the kernel does not multiply with wgmma (008)"
    split = getattr(kernel, "split_k", None)
    if split is not None and split.reduce == "in_kernel":
        # its last block adds the partials after block barriers the producer never reaches
        return None, "warp_specialize: split-K reduced in the kernel (block barriers after the K loop)"
    if len(loops) != 1 or any(s.copy != "tma" for s in head_stages(loops[0])):
        return None, "warp_specialize: the K loop's ring is not TMA copies alone"
    consumers = math.prod(a.extent for a in kernel.tile().axes if a.kind == THREAD)
    producer, consumer = register_split(consumers)
    return WarpRoles(in_flight=int(knobs.get("wgmma_in_flight", 0)), producer_regs=producer,
                     consumer_regs=consumer), ""


def _pipeline(loop, roles=None):
    """The loop's head stages marked prefetch = ring size - 1 (one ring per loop: 010 gives
    its stages the same buffers), after the AsyncWait that waits for them."""
    n = head_length(loop)
    head = loop.body[:n]
    depth = min(s.buffers for s in head if isinstance(s, Stage)) - 1
    stages = tuple(dataclasses.replace(s, prefetch=depth) for s in head if isinstance(s, Stage))
    names: list[str] = []
    for w in head:
        if isinstance(w, AsyncWait):
            names += [x for x in w.stages if x not in names]
    names += [s.name for s in stages if s.name not in names]
    return dataclasses.replace(loop, body=(AsyncWait(tuple(names), roles),) + stages + loop.body[n:])


PASS = KernelPass("015_pipeline_k_outer", "tile", DESCRIPTION, apply, KNOBS, flash_aware=True)
