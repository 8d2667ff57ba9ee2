"""The mbarriers TMA copies complete on, and the tensor maps they copy through, as
002_stage_copies (passes/lower/k002_stage_copies.py) places them around a group of TMA stages.

  tma    one thread (elected in warp 0: If.elect) issues one tensor-map copy
         (cp.async.bulk.tensor) per stage: the box stamped on the stage (Stage.tma: 011,
         swizzled by 012) at the slab's origin, elements past the tensor's end read as
         zero; the group's copies complete on the mbarrier of its slot (SlotBarrier: one
         arrive.expect_tx announcing the boxes' bytes, then the copies; a ring's
         full[slot], else the loop's one mbarrier); the AsyncWait waits on it (`landed`).
         The kernel takes one tensor map per distinct (tensor, box, swizzle)
         (TensorMaps -> KernelFunc.tensor_maps), its shared array is 1024-byte aligned
         (TMA_ALIGN: a swizzle pattern's repeat); only a TMA stage outside a buffered K
         loop falls back to cp.async (stage_plan.plan_stage).

  ring of N, not pipelined: the block's barrier before each refill stays (no barrier
         follows a TMA copy: the mbarrier wait at the AsyncWait makes it visible to each
         thread that waits), so that slot reuse and mbarrier phases stay ordered; the
         loop's one mbarrier (`inits`) completes once per iteration, phase ko.

  mbarrier ring (a pipelined group of TMA stages alone: stage_plan.is_mbarrier_ring) no
         block-wide barrier: full[s] (count 1: the producer's arrive.expect_tx; the copies
         complete_tx) and empty[s] (count: the block's threads). Consumers wait full[ko % N]
         with parity (ko / N) & 1 and arrive on empty[ko % N] at the end of the iteration
         (`release`); before refilling slot s with round r the producer (the elected
         thread) waits empty[s] with parity (r + 1) & 1 (`refill_wait`; round 0: parity 1
         passes on a fresh mbarrier). The election is elect.sync in warp 0, so ptxas issues
         each copy once (no loop over the warp's distinct operands), and the barriers' and
         slots' shared addresses are computed once before the loop (cuda_tma.py).

The ring's arithmetic (which slot and round an iteration's copy is) belongs to the lowering
(stage_plan.slot_of, round_of, iteration) and arrives here as Kernel-IR expressions."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait, TensorMap

TMA_ALIGN = 1024      # bytes: a tensor-map box's shared array (the 128-byte swizzle repeats every 1024)


def mbarrier_name(loop) -> str:
    """The single mbarrier of a K loop whose TMA stages are not pipelined."""
    return f"{loop.var}_mbar"


def full_name(loop) -> str:
    """The ring's full barriers: full[s] completes when the copies of slot s have landed."""
    return f"{loop.var}_full"


def empty_name(loop) -> str:
    """The ring's empty barriers: empty[s] completes when every thread is done reading slot s."""
    return f"{loop.var}_empty"


@dataclasses.dataclass(frozen=True)
class SlotBarrier:
    """The mbarrier that one group's TMA copies into one slot complete on.

    The stage ring owns its mbarriers (declaration, init, arrival counts, the producer's
    arrive.expect_tx, the waits and their phases, the slot index expressions); the copy issue
    (stage_units.tma_copies) owns the copy instructions, and names this barrier in each:
    `TmaLoad(..., barrier=bar.name, slot=bar.slot, expect=False)` (or a tensor copy with
    the same two fields). The issuing thread runs `bar.arrive()` before its copies: one
    arrival announcing `expect_bytes`, which must equal the bytes the copies bring (the
    simulator fails a phase that never completes)."""
    name: str                 # the mbarrier (array) the copies complete on
    slot: object              # K.Expr: which mbarrier of the array; None: a single mbarrier
    expect_bytes: int         # the bytes every copy of the group into this slot brings, together

    def arrive(self) -> MbarrierArrive:
        return MbarrierArrive(self.name, self.slot, self.expect_bytes)


def slot_barrier(loop, pipelined: bool, slot, expect_bytes: int) -> SlotBarrier:
    """The barrier a group's TMA copies into one slot complete on: the ring's full[slot] in a
    pipelined K loop, else the loop's single mbarrier."""
    if pipelined:
        return SlotBarrier(full_name(loop), slot, expect_bytes)
    return SlotBarrier(mbarrier_name(loop), None, expect_bytes)


def elected_issue(bar: SlotBarrier, copies, before=()) -> list:
    """One thread (tid 0; the If is stamped `elect`: sm_90 elects a lane of warp 0) issues
    `copies`: `before` (the ring's wait for the slot to be empty), the arrival announcing
    their bytes on the slot's barrier, the copies."""
    tid0 = K.Binary("==", K.Special("tid.x"), K.Const(0, "int"))
    return [K.If(tid0, tuple(before) + (bar.arrive(),) + tuple(copies), elect=True)]


def landed(loop, pipelined: bool, rnd, slot, iteration) -> MbarrierWait:
    """The consumers' wait for a TMA group's copies: a ring's full[slot] at the parity of
    `rnd` (pipelined), else the loop's mbarrier at phase `iteration`."""
    if pipelined:
        return MbarrierWait(full_name(loop), rnd, slot)
    return MbarrierWait(mbarrier_name(loop), iteration)


def inits(loop, pipelined: bool, ring: bool, threads: int, slots: int) -> list:
    """Before a K loop with TMA stages: its mbarriers (the loop's one, or full[slots]; an
    mbarrier ring's empty[slots] too, every thread arriving), then the block's barrier that
    makes them initialised for every thread."""
    out = [MbarrierInit(full_name(loop), 1, slots) if pipelined else MbarrierInit(mbarrier_name(loop), 1)]
    if ring:                  # every thread arrives on empty[s] when done reading slot s
        out.append(MbarrierInit(empty_name(loop), threads, slots))
    return out + [K.Barrier()]


def release(loop, iteration, slots: int) -> list:
    """The end of an mbarrier ring's iteration j: every thread is done reading slot
    j % slots and arrives on its empty barrier (the producer waits for it before the
    slot's next fill)."""
    return [K.Comment(f"every thread is done reading slot {loop.var} % {slots}: release it to the producer"),
            MbarrierArrive(empty_name(loop), K.Binary("%", iteration, K.Const(slots, "int")))]


def refill_wait(loop, rnd, slot) -> MbarrierWait:
    """The producer's wait before refilling `slot` with round `rnd`: the slot's previous tile
    was read by every thread (phase rnd - 1 of empty[slot]; before its first fill parity 1
    passes at once)."""
    return MbarrierWait(empty_name(loop), K.Binary("+", rnd, K.Const(1, "int")), slot)


class TensorMaps:
    """The tensor-map parameters of one kernel's TMA stages: one per distinct tensor, box and
    swizzle, named free among the kernel's parameters and buffers."""

    def __init__(self, func: K.KernelFunc, types: dict):
        self.func, self.types = func, types
        self.maps: dict[tuple, TensorMap] = {}     # (tensor, box, swizzle) -> parameter

    def name(self, s) -> str:
        """The name of the tensor-map parameter stage s is copied with."""
        key = (s.tensor, s.tma.box, s.tma.swizzle)
        if key not in self.maps:
            taken = {p.name for p in self.func.params} | set(self.types) | {t.name for t in self.maps.values()}
            name, n = f"{s.tensor}_tmap", 1
            while name in taken:
                n += 1
                name = f"{s.tensor}_tmap_{n}"
            self.maps[key] = TensorMap(name, s.tensor, tuple(self.types[s.tensor].shape),
                                       s.tma.box, s.tma.swizzle, s.tma.element_bytes)
        return self.maps[key].name

    def params(self) -> tuple:
        """The tensor maps the kernel takes, in the order its stages first named them."""
        return tuple(self.maps.values())
