"""How one Stage is copied, as the lowering settles it from the Tile IR's fields: the copy
kind (sync, async, tma), the ring of buffers it cycles through (010's stages), how far its
copies run ahead (015's prefetch), the K loop it sits in; which slot and phase one
iteration's copy is (the mbarriers a TMA group's copies complete on are
passes/tma/mbarrier_ring.py's).

The schedule chose the kind (011 tma_copy, 013 async_copy) and the buffering (010); the
lowering only narrows what the kernel as it stands cannot keep: a non-float32 tensor is
copied by the threads (unless the stage holds its halves raw: Stage.dtype), a TMA stage
outside a double-buffered K loop is copied with cp.async in the same schedule. A TMA stage
is one tensor-map copy of the box 011 stamped on it (Stage.tma, with 012's swizzle; the
verifier checks it)."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.index import var
from ...ir.kernel_expr import affine_expr
from ...ir.stages import loop_start, loop_stop
from ...ir.tile_ir import Stage


@dataclasses.dataclass(frozen=True)
class StagePlan:
    kind: str                 # sync | async | tma, after the lowering's checks
    buffered: bool            # a ring of `slots` buffers, iteration ko in slot ko % slots
    loop: object              # the enclosing Loop (None at the top of the tile)
    top: bool                 # the loop statement is at the top of the tile (runs once)
    slots: int = 1            # buffers of the ring (Stage.buffers when buffered, else 1)
    prefetch: int = 0         # K tiles the copies run ahead (Stage.prefetch: slots - 1 when pipelined)


def ranges_in(m, loop) -> dict:
    """Variable ranges inside `loop` (m: the kernel's LoweringState): the same before it
    (prologue) and in it, so that every decision about a stage's copy is the same wherever
    its copy is issued."""
    ranges = dict(m.ranges)
    if loop is not None:
        ranges[loop.var] = loop_stop(loop)
    return ranges


def plan_stage(m, s: Stage, loop_info) -> StagePlan:
    """How stage s is copied; loop_info is (enclosing loop, depth of the loop statement) or None."""
    t = m.types[s.tensor]
    loop, depth = loop_info if loop_info else (None, None)
    top = loop is not None and depth == 0
    buffered = s.buffers >= 2 and top
    kind = s.copy
    if t.dtype != "float32" and s.dtype != t.dtype:     # converted to float as it is copied
        kind = "sync"
    if kind == "tma" and (not buffered or not s.tma):
        kind = "async"
    return StagePlan(kind, buffered, loop, top, s.buffers if buffered else 1, s.prefetch if buffered else 0)


def is_pipelined(stages, plans) -> bool:
    """The group is a pipelined K loop's head (015): its copies run `prefetch` iterations ahead."""
    return all(s.prefetch and p.buffered and p.kind in ("async", "tma") and loop_stop(p.loop) >= 2
               for s, p in zip(stages, plans))


def is_mbarrier_ring(stages, plans) -> bool:
    """A pipelined group of TMA stages alone: its slots are guarded by a full and an empty
    mbarrier each (no block-wide barrier before a refill); a group with cp.async or
    synchronous copies keeps the block's barrier, which also makes those copies visible."""
    return is_pipelined(stages, plans) and all(p.kind == "tma" for p in plans)


# -- the ring's position of one iteration's copy ----------------------------------------------
#
# `it` names which K tile a copy is for: "cur" (tile ko, the loop variable), an int t (tile t,
# issued before the loop: the prologue of a pipelined loop issues tiles 0 .. prefetch - 1;
# "zero" is tile 0), PrologueTiles (those tiles, in a loop of their own), "next" (tile
# ko + prefetch, issued during iteration ko under ko + prefetch < n), None (a stage outside
# any loop). Tiles are numbered by the loop's iteration j = ko - start (a causal key loop
# starts at the block's diagonal tile: ir.stages.loop_start), so the ring's slots and phases
# count from 0 in every block whatever its start and trip count.

def iteration(p: StagePlan, d: int = 0):
    """Iteration j + d of the ring's loop as a Kernel-IR int expression (j = ko - start)."""
    return affine_expr(var(p.loop.var) - loop_start(p.loop) + d)


def variable_start(loop) -> bool:
    """The loop starts at an index of the block: its trip count differs between blocks."""
    return not loop_start(loop).is_const

def tile_offset(p: StagePlan, it) -> int | None:
    """The K tile of `it` relative to ko ("cur" 0, "next" prefetch), or None for a prologue tile."""
    if it == "cur":
        return 0
    if it == "next":
        return max(p.prefetch, 1)
    return None


@dataclasses.dataclass(frozen=True)
class PrologueTiles:
    """`it` of the copies a pipelined loop's prologue issues in a loop of its own: tile `var`
    for var in 0..count (count < slots, so tile t fills slot t in the slots' first round)."""
    var: str
    count: int


def prologue_tile(it) -> int | None:
    if it == "zero":
        return 0
    return it if isinstance(it, int) else None


def slot_of(p: StagePlan, it):
    """Which buffer of the ring the copy for `it` fills, as a Kernel-IR int expression
    (tile % slots), or None when the stage has one buffer."""
    if not p.buffered or it is None or p.loop is None:
        return None
    if isinstance(it, PrologueTiles):
        return K.Var(it.var)
    t = prologue_tile(it)
    if t is not None:
        return K.Const(t % p.slots, "int")
    return K.Binary("%", iteration(p, tile_offset(p, it)), K.Const(p.slots, "int"))


def round_of(p: StagePlan, it):
    """How many times the slot of `it`'s tile was filled before it (tile // slots): the
    phase of the slot's mbarriers that this tile's fill is, as a Kernel-IR expression."""
    if isinstance(it, PrologueTiles):
        return K.Const(0, "int")
    t = prologue_tile(it)
    if t is not None:
        return K.Const(t // p.slots, "int")
    return K.Binary("/", iteration(p, tile_offset(p, it)), K.Const(p.slots, "int"))
