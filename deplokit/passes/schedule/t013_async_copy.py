"""013 async_copy: narrow the remaining stages to cp.async (sm_80+).

Every synchronous stage left (the double-buffered stages of a K loop that TMA did not take,
the stages of a K tail loop, the row stages of reductions such as RMSNorm's x_smem) is
copied with cp.async: each thread issues copies global -> shared that bypass its registers
(and, at 16 bytes, the L1: cp.async.cg) and commits them as one group. A copy moves 16
bytes where the slab's rows and the tensor's rows are 16-byte aligned and contiguous (and
the padded shared rows stay aligned), else 4 bytes (the pass restamps Stage.unit); a unit
past the tensor's end stores zeros with an ordinary store, as the synchronous copy does.

The pass puts an AsyncWait right after every group of stages it narrowed (in the same
body): there each thread waits for its copies (cp.async.wait_group 0) and the block's
barrier makes them visible to every thread. An AsyncWait already after the group (011's,
for its TMA stages) is widened to the group's cp.async stages.

    x_smem = Stage(x, origin=(0, a0, 0), slab=(a1:2048@2))
  ->
    x_smem = AsyncStage(x, origin=(0, a0, 0), slab=(a1:2048@2))
    AsyncWait(x_smem)

    for a2o in 0..8:  # reduce (K)
        input_smem = BufferedStage(input, ...)  ->  input_smem = AsyncBufferedStage(input, ...)
        w_smem = TmaBufferedStage(w, ...)           w_smem = TmaBufferedStage(w, ...)
        AsyncWait(w_smem)                           AsyncWait(input_smem, w_smem)
"""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Stage, Tile, map_body, walk
from ..record import KernelPass, Needs, Noted, PassContext, Skip, flag_knob, replace_tile
from ..stage_geometry import copy_unit, restamp_stages, scope_ranges
from .rewrite import await_copies

DESCRIPTION = "narrow the remaining stages to cp.async copies (sm_80+)"


KNOBS = (flag_knob("enable", "copy the remaining synchronous stages with cp.async", "cp.async copies"),)


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    stages = [s for s, _ in walk(tile.body) if isinstance(s, Stage)]
    if not stages:
        return Skip("nothing is staged")
    sync = [s for s in stages if s.copy == "sync"]
    if not sync:
        return Skip("every stage is already an asynchronous (TMA) copy")
    types = pctx.types
    ranges = {s.name: scope_ranges(tile, loops) for s, loops in walk(tile.body) if isinstance(s, Stage)}

    def why_not(s) -> str:
        if s.prologue is not None:     # 007's prologue transforms each element: cp.async cannot
            return (f"{s.name}: its prologue ({', '.join(c.op for c in s.prologue.body)}) is applied in "
                    "registers between the global load and the shared store: a synchronous copy")
        if s.dtype != "float32":       # halves held raw (008's mma operands): 16-byte copies only
            if copy_unit(dataclasses.replace(s, copy="async"), types[s.tensor], ranges[s.name]) == 1:
                return (f"{s.name}: rows of {s.tensor}'s halves are not 16-byte units "
                        "(cp.async moves 4, 8 or 16 bytes)")
            return ""
        dtype = types[s.tensor].dtype
        return "" if dtype == "float32" else f"{s.name}: {s.tensor} is {dtype}, not float32"

    chosen = {s.name for s in sync if not why_not(s)}
    why = [why_not(s) for s in sync if s.prologue is not None]
    if not chosen:
        return Skip("; ".join(why_not(s) for s in sync))

    def narrow(st):
        if isinstance(st, Stage) and st.name in chosen:
            return dataclasses.replace(st, copy="async")
        return st

    new_tile = Tile(tile.axes, await_copies(map_body(tile.body, narrow), chosen))
    # a 16-byte cp.async also needs 16-byte aligned shared rows: the copy units are restamped
    narrowed = restamp_stages(replace_tile(kernel, new_tile), pctx.types)
    return Noted(narrowed, tuple(why)) if why else narrowed


PASS = KernelPass("013_async_copy", "tile", DESCRIPTION, apply, KNOBS, needs=(Needs("cp_async", "cp.async (sm_80+)"),),
                  flash_aware=True)
