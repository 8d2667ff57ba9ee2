"""Stage, AsyncWait -> Kernel IR: the copy of a slab into shared memory, and the point where
asynchronous copies land (called by k001_materialize for each statement it lowers).

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
  tma    thread 0 issues one bulk copy per row (or per run of whole rows, when the slab spans
         the tensor's full width), all completing on one mbarrier per K loop whose arrival
         count is the number of copies per iteration; the AsyncWait waits on the mbarrier
         (phase: the loop variable). A row past the end of an outer dimension is clamped
         onto the last row (its values only reach outputs that are never stored). A stage
         whose rows no longer allow a bulk copy (a pad added after 011 chose TMA) falls back
         to cp.async.

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
from ...ir.loop_ir import Loop
from ...ir.tile_ir import AsyncWait, Stage, walk
from ..stage_geometry import head_stages
from .smem_layout import PlacedStage, smem_size
from .stage_plan import StagePlan, is_pipelined, mbarrier_name, plan_stage, tma_runs
from .stage_units import copy_stage, issue_tma


class StageCopier:
    """The stage copies of one kernel, for the k001_materialize.Materializer `m` that walks it
    (its public types, ranges, threads, stages, loop_depth and declare_shared)."""

    def __init__(self, m):
        self.m = m
        self.emitted: set[int] = set()      # ids of stages (AsyncWaits) already materialised
        self.loops: dict[int, tuple] = {}   # id(loop body) -> (loop, depth of the loop statement)
        self.by_name: dict[str, tuple] | None = None
        self.unsynced: set[int] = set()     # ids of AsyncWaits whose barrier the group before leaves to them

    # -- hooks the materialiser calls ---------------------------------------------------------
    def before(self, body, i) -> list:
        """Called for every statement body[i] before it is materialised: the consecutive
        stages starting at body[i] are copied together; an AsyncWait waits for its stages
        (it sees its neighbours here); a K loop's prologue goes before the loop."""
        s = body[i]
        if isinstance(s, Stage):
            if id(s) in self.emitted or (i and isinstance(body[i - 1], Stage)):
                return []
            j = i
            while j < len(body) and isinstance(body[j], Stage):
                j += 1
            group = tuple(body[i:j])
            self.emitted |= {id(g) for g in group}
            return self.group(group, self.loops.get(id(body)), body, i, j)
        if isinstance(s, AsyncWait):
            if id(s) in self.emitted:
                return []
            self.emitted.add(id(s))
            return self.wait(s, body, i)
        if isinstance(s, Loop):
            self.loops[id(s.body)] = (s, self.m.loop_depth)
            return self.prologue(s, self.m.loop_depth)
        return []

    def stage(self, s: Stage) -> list:
        """A Stage reached without `before` (materialised on its own)."""
        if id(s) in self.emitted:
            return []
        self.emitted.add(id(s))
        return self.group((s,), self._lookup(s.name)[1], (s,), 0, 1)

    def async_wait(self, s: AsyncWait) -> list:
        """An AsyncWait reached without `before` (materialised on its own)."""
        if id(s) in self.emitted:
            return []
        self.emitted.add(id(s))
        return self.wait(s, (s,), 0)

    def _lookup(self, name: str) -> tuple:
        """(Stage, (enclosing loop, depth of the loop statement) or None) of the stage `name`."""
        if self.by_name is None:
            self.by_name = {}
            for st, loops in walk(self.m.tile.body):
                if isinstance(st, Stage):
                    info = (loops[-1], len(loops) - 1) if loops and isinstance(loops[-1], Loop) else None
                    self.by_name.setdefault(st.name, (st, info))
        if name not in self.by_name:
            raise ValueError(f"{self.m.kernel.name}: AsyncWait names {name}, which is no stage of the kernel")
        return self.by_name[name]

    # -- planning -----------------------------------------------------------------------------
    def plan(self, s: Stage, loop_info) -> StagePlan:
        return plan_stage(self.m, s, loop_info)

    def _register(self, s: Stage, p: StagePlan) -> list:
        """Declare the shared array (once) and record the stage for the loads that follow."""
        m = self.m
        m.note_read(s.tensor)
        out = [K.SharedArray(s.name, smem_size(s) * (2 if p.buffered else 1))] if m.declare_shared(s.name) else []
        base = None
        if p.buffered:
            base = K.Binary("*", K.Binary("%", K.Var(p.loop.var), K.Const(2, "int")), K.Const(smem_size(s), "int"))
        m.stages[s.name] = PlacedStage(**{f.name: getattr(s, f.name) for f in dataclasses.fields(Stage)}, base=base)
        return out

    # -- groups -----------------------------------------------------------------------------------
    def group(self, stages, loop_info, body, i, j) -> list:
        """The copies of the group body[i:j]. Its asynchronous copies must be waited for by an
        AsyncWait of the same body: after the group, or before it when the group is a
        pipelined K loop's head (the wait there is for the copies issued one iteration
        earlier)."""
        plans = [self.plan(s, loop_info) for s in stages]
        ahead = is_pipelined(stages, plans)
        self._check_awaited(stages, plans, body[:i] if ahead else body[j:], ahead)
        out: list = []
        for s, p in zip(stages, plans):
            out += self._register(s, p)
        if ahead:
            return out + self._steady(stages, plans)
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        syncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "sync"]
        if self.m.loop_depth and (tma or any(not p.buffered for p in plans)):
            out.append(K.Barrier())           # the previous iteration's readers are done
        it = "cur" if loop_info else None
        if tma:
            out += issue_tma(self.m, tma, it)
        for s, p in asyncs:
            out += copy_stage(self.m, s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        for s, p in syncs:
            out += copy_stage(self.m, s, p, it)
        if syncs:
            if j < len(body) and isinstance(body[j], AsyncWait):
                self.unsynced.add(id(body[j]))    # its barrier comes after the waits
            else:
                out.append(K.Barrier())       # the copies are visible to every thread
        return out

    def _check_awaited(self, stages, plans, scope, pipelined):
        awaited = {n for w in scope if isinstance(w, AsyncWait) for n in w.stages}
        missing = [s.name for s, p in zip(stages, plans) if p.kind != "sync" and s.name not in awaited]
        if missing:
            where = "before them (their K loop is pipelined)" if pipelined else "after them"
            raise ValueError(f"{self.m.kernel.name}: {', '.join(missing)} copied asynchronously, but no "
                             f"AsyncWait {where} in the same body waits for the copies")

    def wait(self, w: AsyncWait, body, i) -> list:
        """Where the copies of w's stages have landed: cp.async.wait_group 0 for cp.async
        stages, an mbarrier wait (phase: the loop variable) for TMA stages, then a barrier
        that makes copies the threads made visible to every thread. Before a pipelined K
        loop's head stages the barrier is kept even for TMA copies alone: it also tells that
        every thread is done reading the buffer those stages refill."""
        kinds, bars = set(), []
        for name in w.stages:
            st, info = self._lookup(name)
            p = self.plan(st, info)
            kinds.add(p.kind)
            if p.kind == "tma" and all(p.loop is not b for b in bars):
                bars.append(p.loop)
        j = i + 1
        while j < len(body) and isinstance(body[j], Stage):
            j += 1
        nxt = tuple(body[i + 1:j])
        info = self.loops.get(id(body))
        refill = bool(nxt) and any(s.name in w.stages for s in nxt) and \
            is_pipelined(nxt, [self.plan(s, info) for s in nxt])
        out: list = []
        if "async" in kinds:
            out.append(K.CpAsyncWait(0))
        for loop in bars:
            out.append(K.MbarrierWait(mbarrier_name(loop), K.Var(loop.var)))
        if refill or kinds & {"async", "sync"} or id(w) in self.unsynced:
            out.append(K.Barrier())
        return out

    def prologue(self, loop, depth) -> list:
        """Before a K loop: the mbarrier of its TMA stages and, when pipelined, the first
        tile's copies."""
        stages = head_stages(loop)
        if not stages:
            return []
        plans = [self.plan(s, (loop, depth)) for s in stages]
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        ahead = is_pipelined(stages, plans)
        out: list = []
        if ahead:
            for s, p in zip(stages, plans):
                if self.m.declare_shared(s.name):
                    out.append(K.SharedArray(s.name, smem_size(s) * 2))
        if tma:
            count = sum(tma_runs(self.m, s, p)[2] for s, p in tma)
            out += [K.MbarrierInit(mbarrier_name(loop), count), K.Barrier()]
        if ahead:
            out.append(K.Comment(f"prologue: issue the copies of K tile {loop.var} = 0"))
            out += self._issue(stages, plans, "zero")
        return out

    def _steady(self, stages, plans) -> list:
        """The pipelined head of iteration ko, after its AsyncWait (tile ko has landed, the
        barrier passed): issue tile ko + 1."""
        loop = plans[0].loop
        out: list = []
        nxt = K.Binary("<", K.Binary("+", K.Var(loop.var), K.Const(1, "int")), K.Const(loop.extent, "int"))
        out.append(K.Comment(f"steady state: issue K tile {loop.var} + 1 while tile {loop.var} computes"))
        out.append(K.If(nxt, tuple(self._issue(stages, plans, "next"))))
        return out

    def _issue(self, stages, plans, it) -> list:
        out: list = []
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        if tma:
            out += issue_tma(self.m, tma, it)
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        for s, p in asyncs:
            out += copy_stage(self.m, s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        return out
