"""How one Stage is copied, as the lowering settles it from the Tile IR's fields: the copy
kind (sync, async, tma), whether it ping-pongs between two buffers, the K loop it sits in.

The schedule chose the kind (011 tma_copy, 013 async_copy) and the buffering (010); the
lowering only narrows what the kernel as it stands cannot keep: a non-float32 tensor is
copied by the threads, a TMA stage outside a double-buffered K loop is copied with cp.async
in the same schedule. A TMA stage is one tensor-map copy of the box 011 stamped on it
(Stage.tma, with 012's swizzle; the verifier checks it)."""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Stage


@dataclasses.dataclass(frozen=True)
class StagePlan:
    kind: str                 # sync | async | tma, after the lowering's checks
    buffered: bool            # two buffers, ping-pong on the loop variable
    loop: object              # the enclosing Loop (None at the top of the tile)
    top: bool                 # the loop statement is at the top of the tile (runs once)


def ranges_in(m, loop) -> dict:
    """Variable ranges inside `loop` (m: the kernel's LoweringState): the same before it
    (prologue) and in it, so that every decision about a stage's copy is the same wherever
    its copy is issued."""
    ranges = dict(m.ranges)
    if loop is not None:
        ranges[loop.var] = loop.extent
    return ranges


def plan_stage(m, s: Stage, loop_info) -> StagePlan:
    """How stage s is copied; loop_info is (enclosing loop, depth of the loop statement) or None."""
    t = m.types[s.tensor]
    loop, depth = loop_info if loop_info else (None, None)
    top = loop is not None and depth == 0
    buffered = s.buffers == 2 and top
    kind = s.copy
    if t.dtype != "float32":
        kind = "sync"
    if kind == "tma" and (not buffered or not s.tma):
        kind = "async"
    return StagePlan(kind, buffered, loop, top)


def is_pipelined(stages, plans) -> bool:
    """The group is a pipelined K loop's head (015): its copies run one iteration ahead."""
    return all(s.prefetch and p.buffered and p.kind in ("async", "tma") and p.loop.extent >= 2
               for s, p in zip(stages, plans))


def mbarrier_name(loop) -> str:
    return f"{loop.var}_mbar"
