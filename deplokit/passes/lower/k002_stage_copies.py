"""002 stage_copies: the copy of each staged slab into shared memory, and the points where
asynchronous copies land and the barriers that make them visible.

001_materialize leaves a StageCopy / StageWait / StagePrologue (deplokit.ir.kernel_stage)
where the Tile IR had a Stage, an AsyncWait, a K loop with stages at its head; this pass
replaces them.

The consecutive Stages of one body are copied together and share their barriers. How each
stage is copied follows its Tile-IR fields (see deplokit.ir.tile_ir.Stage) and what its
rows allow (deplokit.passes.stage_geometry). A group only issues its copies: the wait for
its asynchronous copies and the barrier that makes them visible are emitted at the
AsyncWait that names its stages (right after the group, or, in a pipelined K loop, before
it); an asynchronous stage no AsyncWait waits for is an error.

  sync   the block's threads copy with float4 (a 128-bit global load and, where the padded
         shared rows stay 16-byte aligned, a 128-bit shared store) when the rows are
         contiguous and 16-byte aligned, else one float at a time; an element (or vector)
         past the tensor's end stores 0.
  async  cp.async of 16 bytes under the same conditions (and 16-byte aligned shared rows),
         else of 4 bytes; an element past the end stores 0 with an ordinary store. The
         copies form one group: commit; the AsyncWait waits for it (wait_group 0).
  tma    thread 0 issues one tensor-map copy (cp.async.bulk.tensor) per stage: the box
         stamped on the stage (Stage.tma: 011, swizzled by 012) at the slab's origin,
         elements past the tensor's end read as zero; all complete on one mbarrier per K
         loop whose arrival count is the number of TMA stages; the AsyncWait waits on the
         mbarrier (phase: the loop variable). The kernel takes one tensor map per distinct
         (tensor, box, swizzle) (KernelFunc.tensor_maps), its shared array is 1024-byte
         aligned (a swizzle pattern's repeat); only a TMA stage outside a double-buffered
         K loop falls back to cp.async here.

Barriers (hazards within a block), with the AsyncWait's part marked [AsyncWait: ...]:

  single buffer   [barrier if in a loop: the previous iteration's readers are done]
                  copies; [AsyncWait: wait]; barrier (the copies are visible: the
                  AsyncWait's, or the group's own when it has no asynchronous copy)
  double buffer   iteration ko fills buffer ko % 2 (loads add (ko % 2) * size): the readers
                  of that buffer ran in iteration ko - 2, before iteration ko - 1's barrier,
                  so the barrier before the copy goes: one barrier per iteration. TMA keeps
                  it (no barrier follows a TMA copy: the mbarrier wait at the AsyncWait makes
                  it visible to each thread that waits), so that buffer reuse and mbarrier
                  phases stay ordered.
  pipelined       (AsyncWait before the prefetch=1 stages.) Prologue (before the loop):
                  [mbarrier init; barrier]; issue tile 0 into buffer 0. Steady state,
                  iteration ko: [AsyncWait: wait for tile ko (cp.async.wait 0 / mbarrier
                  wait, phase ko); barrier (tile ko is visible to every thread, and every
                  thread is done reading buffer (ko + 1) % 2 in iteration ko - 1)]; the
                  stages: if ko + 1 < n: issue tile ko + 1 into buffer (ko + 1) % 2; compute
                  tile ko while the copy of tile ko + 1 is in flight. Epilogue: the last
                  iteration issues nothing. One barrier per iteration.

A synchronous stage in a group right before an AsyncWait leaves its visibility barrier to
the AsyncWait's (one barrier for the whole group, after the waits).
"""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.kernel_ir import KernelProgram
from ...ir.kernel_stage import StageCopy, StagePrologue, StageWait
from ..record import Pass
from ..stage_geometry import head_stages
from .smem_layout import smem_size
from .stage_plan import StagePlan, is_pipelined, mbarrier_name, plan_stage
from .stage_units import copy_stage, issue_tma


def apply(program: KernelProgram, pctx=None) -> KernelProgram:
    types = {b.name: b.type for b in tuple(program.buffers) + tuple(program.written)}
    kernels = tuple(StageCopier(f, types).run() for f in program.kernels)
    if kernels == program.kernels:
        return program
    return dataclasses.replace(program, kernels=kernels)


TMA_ALIGN = 1024      # bytes: a tensor-map box's shared array (the 128-byte swizzle repeats every 1024)

PASS = Pass("002_stage_copies", "kernel", "spell each stage's copy into shared memory (float4, cp.async, TMA; "
            "double buffered, pipelined) with its waits and barriers", apply)


@dataclasses.dataclass
class _Scope:
    """What the copy of a stage reads about the place it is issued from (stage_plan,
    stage_units): the tensors' types, the variables in scope, the block's threads."""
    types: dict
    ranges: dict
    threads: int


class StageCopier:
    """The stage copies of one Kernel-IR function."""

    def __init__(self, func: K.KernelFunc, types):
        self.func, self.types = func, types
        self.declared: set[str] = set()          # shared arrays declared so far
        self.tensor_maps: dict[tuple, K.TensorMap] = {}   # (tensor, box, swizzle) -> parameter
        self.by_name: dict[str, StageCopy] = {}
        for s in K.walk_stmts(func.body):
            if isinstance(s, StageCopy):
                self.by_name.setdefault(s.stage.name, s)

    def run(self) -> K.KernelFunc:
        pending = (StageCopy, StageWait, StagePrologue)
        if not any(isinstance(s, pending) for s in K.walk_stmts(self.func.body)):
            return self.func
        body = self.body(self.func.body)
        return dataclasses.replace(self.func, body=body,
                                   tensor_maps=tuple(self.func.tensor_maps) + tuple(self.tensor_maps.values()))

    def tensor_map(self, s) -> str:
        """The name of the tensor-map parameter stage s is copied with (one per distinct
        tensor, box and swizzle), free among the kernel's parameters and buffers."""
        key = (s.tensor, s.tma.box, s.tma.swizzle)
        if key not in self.tensor_maps:
            taken = {p.name for p in self.func.params} | set(self.types) | \
                {t.name for t in self.tensor_maps.values()}
            name, n = f"{s.tensor}_tmap", 1
            while name in taken:
                n += 1
                name = f"{s.tensor}_tmap_{n}"
            self.tensor_maps[key] = K.TensorMap(name, s.tensor, tuple(self.types[s.tensor].shape),
                                                s.tma.box, s.tma.swizzle)
        return self.tensor_maps[key].name

    def scope(self, ranges) -> _Scope:
        return _Scope(self.types, dict(ranges), self.func.threads)

    def plan(self, copy: StageCopy, stage=None) -> StagePlan:
        return plan_stage(self.scope(copy.ranges), stage or copy.stage, copy.loop_info)

    def body(self, body) -> tuple:
        out: list = []
        i, unsynced = 0, False
        while i < len(body):
            s = body[i]
            if isinstance(s, StageCopy):
                j = i
                while j < len(body) and isinstance(body[j], StageCopy):
                    j += 1
                stmts, unsynced = self.group(body, i, j)
                out += stmts
                i = j
                continue
            if isinstance(s, StageWait):
                out += self.wait(s, body, i, unsynced)
            elif isinstance(s, StagePrologue):
                out += self.prologue(s)
            elif isinstance(s, K.For):
                out.append(dataclasses.replace(s, body=self.body(s.body)))
            elif isinstance(s, K.If):
                out.append(dataclasses.replace(s, then=self.body(s.then), orelse=self.body(s.orelse)))
            else:
                out.append(s)
            unsynced = False
            i += 1
        return tuple(out)

    def _lookup(self, name: str) -> StageCopy:
        if name not in self.by_name:
            raise ValueError(f"{self.func.name}: AsyncWait names {name}, which is no stage of the kernel")
        return self.by_name[name]

    def _declare(self, s, p: StagePlan) -> list:
        """The stage's shared array, the first time (both buffers when double buffered)."""
        if s.name in self.declared:
            return []
        self.declared.add(s.name)
        align = {"align": TMA_ALIGN} if p.kind == "tma" else {}
        return [K.SharedArray(s.name, smem_size(s) * (2 if p.buffered else 1), **align)]

    # -- groups -----------------------------------------------------------------------------------
    def group(self, body, i, j) -> tuple[list, bool]:
        """The copies of the consecutive stages body[i:j], and whether the StageWait right
        after them owes their visibility barrier. Their asynchronous copies must be waited for
        by a StageWait of the same body: after the group, or before it when the group is a
        pipelined K loop's head (the wait there is for the copies issued one iteration
        earlier)."""
        copies = body[i:j]
        first = copies[0]
        m = self.scope(first.ranges)
        stages = [c.stage for c in copies]
        plans = [self.plan(c) for c in copies]
        ahead = is_pipelined(stages, plans)
        self._check_awaited(stages, plans, body[:i] if ahead else body[j:], ahead)
        out: list = []
        for s, p in zip(stages, plans):
            out += self._declare(s, p)
        if ahead:
            return out + self._steady(m, stages, plans), False
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        syncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "sync"]
        if first.loop_depth and (tma or any(not p.buffered for p in plans)):
            out.append(K.Barrier())           # the previous iteration's readers are done
        it = "cur" if first.loop_info else None
        if tma:
            out += issue_tma(m, tma, it, self.tensor_map)
        for s, p in asyncs:
            out += copy_stage(m, s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        for s, p in syncs:
            out += copy_stage(m, s, p, it)
        unsynced = False
        if syncs:
            if j < len(body) and isinstance(body[j], StageWait):
                unsynced = True                # its barrier comes after the waits
            else:
                out.append(K.Barrier())       # the copies are visible to every thread
        return out, unsynced

    def _check_awaited(self, stages, plans, scope, pipelined):
        awaited = {n for w in scope if isinstance(w, StageWait) for n in w.wait.stages}
        missing = [s.name for s, p in zip(stages, plans) if p.kind != "sync" and s.name not in awaited]
        if missing:
            where = "before them (their K loop is pipelined)" if pipelined else "after them"
            raise ValueError(f"{self.func.name}: {', '.join(missing)} copied asynchronously, but no "
                             f"AsyncWait {where} in the same body waits for the copies")

    def wait(self, w: StageWait, body, i, unsynced: bool) -> list:
        """Where the copies of w's stages have landed: cp.async.wait_group 0 for cp.async
        stages, an mbarrier wait (phase: the loop variable) for TMA stages, then a barrier
        that makes copies the threads made visible to every thread. Before a pipelined K
        loop's head stages the barrier is kept even for TMA copies alone: it also tells that
        every thread is done reading the buffer those stages refill."""
        kinds, bars = set(), []
        for name in w.wait.stages:
            p = self.plan(self._lookup(name))
            kinds.add(p.kind)
            if p.kind == "tma" and all(p.loop is not b for b in bars):
                bars.append(p.loop)
        j = i + 1
        while j < len(body) and isinstance(body[j], StageCopy):
            j += 1
        nxt = body[i + 1:j]
        refill = bool(nxt) and any(c.stage.name in w.wait.stages for c in nxt) and \
            is_pipelined([c.stage for c in nxt], [self.plan(c) for c in nxt])
        out: list = []
        if "async" in kinds:
            out.append(K.CpAsyncWait(0))
        for loop in bars:
            out.append(K.MbarrierWait(mbarrier_name(loop), K.Var(loop.var)))
        if refill or kinds & {"async", "sync"} or unsynced:
            out.append(K.Barrier())
        return out

    def prologue(self, pro: StagePrologue) -> list:
        """Before a K loop: the mbarrier of its TMA stages and, when pipelined, the first
        tile's copies."""
        loop = pro.loop
        stages = head_stages(loop)
        if not stages:
            return []
        m = self.scope(pro.ranges)
        plans = [plan_stage(m, s, (loop, pro.depth)) for s in stages]
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        ahead = is_pipelined(stages, plans)
        out: list = []
        if ahead:
            for s, p in zip(stages, plans):
                out += self._declare(s, p)
        if tma:
            # one arrival (with the box's bytes expected) per tensor-map copy
            out += [K.MbarrierInit(mbarrier_name(loop), len(tma)), K.Barrier()]
        if ahead:
            out.append(K.Comment(f"prologue: issue the copies of K tile {loop.var} = 0"))
            out += self._issue(m, stages, plans, "zero")
        return out

    def _steady(self, m, stages, plans) -> list:
        """The pipelined head of iteration ko, after its AsyncWait (tile ko has landed, the
        barrier passed): issue tile ko + 1."""
        loop = plans[0].loop
        out: list = []
        nxt = K.Binary("<", K.Binary("+", K.Var(loop.var), K.Const(1, "int")), K.Const(loop.extent, "int"))
        out.append(K.Comment(f"steady state: issue K tile {loop.var} + 1 while tile {loop.var} computes"))
        out.append(K.If(nxt, tuple(self._issue(m, stages, plans, "next"))))
        return out

    def _issue(self, m, stages, plans, it) -> list:
        out: list = []
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        if tma:
            out += issue_tma(m, tma, it, self.tensor_map)
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        for s, p in asyncs:
            out += copy_stage(m, s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        return out
