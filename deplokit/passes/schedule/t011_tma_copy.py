"""011 tma_copy: narrow eligible BufferedStages to TmaBufferedStage (sm_90+).

A TMA stage is copied by bulk copies (cp.async.bulk, the tensor memory accelerator's 1-D
form): one thread issues one copy per row of the slab (one copy for the whole slab when it
spans its tensor's full width), the TMA unit moves the bytes without any thread's
registers, and the copies complete on an mbarrier the block waits on. A bulk copy moves a
contiguous run of 16-byte units between 16-byte aligned addresses, so a stage is eligible
when

  * it is buffered (a ring of 2 to 4) at the head of a K-outer loop (010),
  * the tensor is float32 and the slab's innermost axis runs along its last dimension,
  * every row starts at a multiple of 4 floats (row stride and origin alike) and is a
    multiple of 4 floats long, or the slab spans the tensor's full width (rows of 13 floats
    included): then it is one contiguous run, one bulk copy,
  * a row that may run past the end of the tensor's last dimension does so only at 16-byte
    unit boundaries (012 then splits the row so that every bulk copy is wholly inside or
    wholly outside the tensor); rows past an outer dimension's end are clamped;
  * it needs at most `max_copies` bulk copies per iteration: one thread issues them one
    after another (an mbarrier arrival and a copy each) while the other threads compute,
    so a slab of many short rows (a Linear's weight tile: 64 rows of 64 bytes) is left to
    cp.async, whose copies every thread issues at once (and which 014 may pad).

The copies are asynchronous: the pass puts an AsyncWait naming the stages it narrowed right
after their group at the head of the K loop (the point where the mbarrier wait lets every
thread read them; 013 widens it with the group's cp.async stages, 015 moves it before the
stages when it pipelines the loop). The plan is stamped on the stage (Stage.tma, printed as
bulk=COPIESxFLOATS): the lowering spells exactly these copies, and 012/014, which change the
stage after this pass, keep the stamp true.

    for a2o in 0..4:  # reduce (K)
        x_smem = BufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
        for a2i in 0..16:  # reduce (K)
  ->
    for a2o in 0..4:  # reduce (K)
        x_smem = TmaBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1), bulk=16x16)
        AsyncWait(x_smem)
        for a2i in 0..16:  # reduce (K)
"""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Tile
from ..stage_geometry import head_stages, k_outer_loops, restamp_stages, rewrite_k_heads, scope_ranges, tma_stamp
from ..record import KernelPass, Knob, Needs, PassContext, Skip, flag_knob, replace_tile
from .rewrite import await_copies

DESCRIPTION = "narrow eligible BufferedStages to TMA copies (sm_90+)"


def _default_max_copies(kernel, target) -> int:
    # a register-tiled matmul's K loop is FFMA-bound: one thread issuing a row copy after
    # another (about 12 instructions each) costs it more issue slots than every thread's
    # one or two cp.async
    return 8 if kernel.register_tiles else 32


KNOBS = (flag_knob("enable", "copy eligible BufferedStages with TMA bulk copies", "TMA copies"),
         Knob("max_copies", (8, 16, 32, 64, 128), _default_max_copies,
              "most bulk copies (one per row) a TMA stage may issue per K iteration"))


def plan(stage, loop, tile, types, max_copies: int = 1 << 30) -> tuple[tuple[int, ...], str]:
    """(the stage's TMA plan, ''), the plan stamped on it (Stage.tma), or ((), why not)."""
    t = types[stage.tensor]
    if t.dtype != "float32":
        return (), f"{stage.name}: {stage.tensor} is {t.dtype}, not float32"
    stamp, why = tma_stamp(stage, t.shape, scope_ranges(tile, (loop,)))
    if why:
        return (), f"{stage.name}: {why}"
    if stamp[2] > max_copies:
        return (), (f"{stage.name}: {stamp[2]} bulk copies per iteration, more than max_copies={max_copies} "
                    f"one thread should issue (cp.async instead)")
    return stamp, ""


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    loops = k_outer_loops(tile)
    candidates = [(s, lp) for lp in loops for s in head_stages(lp) if s.buffers >= 2 and s.copy == "sync"]
    if not candidates:
        return Skip("no BufferedStage at the head of a K-outer loop (010 double_buffer did not apply)")
    reasons, chosen = [], {}
    for s, lp in candidates:
        stamp, why = plan(s, lp, tile, pctx.types, pctx.knobs["max_copies"])
        if why:
            reasons.append(why)
        else:
            chosen[s.name] = stamp
    if not chosen:
        return Skip("; ".join(reasons))
    kernel = rewrite_k_heads(kernel, lambda s, lp: dataclasses.replace(s, copy="tma", tma=chosen[s.name])
                             if s.name in chosen else s)
    tile = kernel.tile()
    new_tile = Tile(tile.axes, await_copies(tile.body, chosen))
    # a TMA stage's thread copy unit is its cp.async fallback's (16-byte aligned shared rows)
    return restamp_stages(replace_tile(kernel, new_tile), pctx.types)


PASS = KernelPass("011_tma_copy", "tile", DESCRIPTION, apply, KNOBS, needs=(Needs("tma", "TMA (bulk copies need sm_90)"),))
