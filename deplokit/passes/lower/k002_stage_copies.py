"""002 stage_copies: the copy of each staged slab into shared memory, and the points where
asynchronous copies land and the barriers that make them visible.

001_materialize leaves a StageCopy / StageWait / StagePrologue (deplokit.ir.kernel_ir)
where the Tile IR had a Stage, an AsyncWait, a K loop with stages at its head; this pass
replaces them.

The consecutive Stages of one body are copied together and share their barriers. How each
stage is copied follows its Tile-IR fields (see deplokit.ir.tile_ir.Stage), its copy unit
(Stage.unit) and TMA runs (Stage.tma) as the schedule stamped them. A group only issues its copies: the wait for
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
  tma    one thread (elected in warp 0) issues one tensor-map copy per stage, completing on
         the mbarrier of its slot; the AsyncWait waits on it (passes/tma/mbarrier_ring.py:
         the tensor maps, the mbarriers, their waits and phases). Only a TMA stage outside a
         buffered K loop falls back to cp.async here.

Barriers (hazards within a block), with the AsyncWait's part marked [AsyncWait: ...]:

  single buffer   [barrier if in a loop: the previous iteration's readers are done]
                  copies; [AsyncWait: wait]; barrier (the copies are visible: the
                  AsyncWait's, or the group's own when it has no asynchronous copy)
  ring of N       (010's stages) iteration ko fills slot ko % N (loads add the slot's base):
                  the readers of that slot ran in iteration ko - N, before iteration ko - 1's
                  barrier, so the barrier before the copy goes: one barrier per iteration.
                  TMA keeps it (passes/tma/mbarrier_ring.py says why).
  pipelined       (AsyncWait before the prefetch=N-1 stages.) Prologue: [mbarrier init;
                  barrier]; issue tiles 0 .. N-2 into slots 0 .. N-2 (a loop of their own
                  when more than one; one cp.async group each). Iteration ko: [AsyncWait:
                  wait for tile ko (cp.async.wait_group N-2 / full[ko % N], parity of the
                  round ko / N); barrier (tile ko is visible to every thread, and every
                  thread is done reading slot (ko - 1) % N)]; the stages: if ko + N - 1 < n:
                  issue tile ko + N - 1 into slot (ko + N - 1) % N (cp.async with N > 2:
                  commit every iteration, even an empty group, so wait_group counts alike);
                  compute tile ko. The last N - 1 iterations issue nothing. A loop from an
                  index of the block (causal keys) counts j = ko - start for ko, and issues
                  prologue tile j only where j < its trips (stage_plan.iteration).
  mbarrier ring   (a pipelined group of TMA stages alone) no block-wide barrier: a full and
                  an empty mbarrier per slot (passes/tma/mbarrier_ring.py).

A synchronous stage in a group right before an AsyncWait leaves its visibility barrier to
the AsyncWait's (one barrier for the whole group, after the waits).
"""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.index import var
from ...ir.kernel_cp_async import CpAsyncCommit, CpAsyncWait
from ...ir.kernel_expr import affine_expr
from ...ir.kernel_ir import KernelProgram, StageCopy, StagePrologue, StageWait
from ...ir.smem_layout import smem_size, stage_ctype
from ...ir.stages import head_stages, loop_start, loop_stop, transposed
from ...target import STATIC_SMEM_PER_BLOCK
from ..record import Pass
from ..tma import mbarrier_ring as ring
from ..tma.proxy_fence import fence_generic_stores
from ..wgmma.warp_roles import roles_of, split_roles
from .dynamic_smem import carve
from .stage_plan import (
    PrologueTiles,
    StagePlan,
    is_mbarrier_ring,
    is_pipelined,
    iteration,
    plan_stage,
    round_of,
    slot_of,
    variable_start,
)
from .stage_transpose import copy_transposed
from .stage_units import copy_stage as copy_in_order
from .stage_units import issue_tma


def copy_stage(m, s, p, it) -> list:
    """One iteration's copy of a thread-copied stage: a transposed (k-major) slab in the
    tensor's order, stored down the columns; any other in the stage's own order."""
    if transposed(s) and p.kind != "async":
        return copy_transposed(m, s, p, it)
    return copy_in_order(m, s, p, it)


def apply(program: KernelProgram, pctx=None) -> KernelProgram:
    types = {b.name: b.type for b in tuple(program.buffers) + tuple(program.written)}
    target = getattr(pctx, "target", None)
    static = target.static_smem_per_block if target is not None else STATIC_SMEM_PER_BLOCK
    # 015's producer/consumer schedule moves the ring's issue to a warpgroup of its own
    kernels = tuple(carve(split_roles(fence_generic_stores(StageCopier(f, types).run()), roles_of(f)), static)
                    for f in program.kernels)
    if kernels == program.kernels:
        return program
    return dataclasses.replace(program, kernels=kernels)


PASS = Pass("002_stage_copies", "kernel", "spell each stage's copy into shared memory (float4, cp.async, TMA; "
            "double buffered, pipelined) with its waits and barriers", apply)


@dataclasses.dataclass
class _Scope:
    """What the copy of a stage reads about the place it is issued from (stage_plan,
    stage_units): the tensors' types, the variables in scope, the block's threads, and the
    kernel's tensor-map parameter a TMA stage is copied through."""
    types: dict
    ranges: dict
    threads: int
    tensor_map: object = None       # Stage -> the name of its tensor-map parameter


class StageCopier:
    """The stage copies of one Kernel-IR function."""

    def __init__(self, func: K.KernelFunc, types):
        self.func, self.types = func, types
        self.declared: set[str] = set()          # shared arrays declared so far
        self.tensor_maps = ring.TensorMaps(func, types)   # the TMA stages' tensor-map parameters
        self.rings: dict[str, StagePlan] = {}    # K loops whose slots full/empty mbarriers guard -> a plan
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
                                   tensor_maps=tuple(self.func.tensor_maps) + self.tensor_maps.params())

    def scope(self, ranges) -> _Scope:
        return _Scope(self.types, dict(ranges), self.func.threads, self.tensor_maps.name)

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
                inner = self.body(s.body)
                if s.var in self.rings:        # the ring's K loop (its prologue came just before)
                    p = self.rings.pop(s.var)
                    inner += tuple(ring.release(p.loop, iteration(p), p.slots))
                out.append(dataclasses.replace(s, body=inner))
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
        """The stage's shared array, the first time (every slot of its ring)."""
        if s.name in self.declared:
            return []
        self.declared.add(s.name)
        align = {"align": ring.TMA_ALIGN} if p.kind == "tma" else {}
        ctype = stage_ctype(s, self.types[s.tensor].dtype)
        return [K.SharedArray(s.name, smem_size(s) * p.slots, ctype=ctype, **align)]

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
            out += issue_tma(m, tma, it)
        for s, p in asyncs:
            out += copy_stage(m, s, p, it)
        if asyncs:
            out.append(CpAsyncCommit())
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
        """Where the copies of w's stages have landed: cp.async.wait_group for cp.async stages
        (0, or slots - 2 before a pipelined ring's refill: the newer groups may stay in
        flight), an mbarrier wait for TMA stages (a ring's full[ko % slots], parity of the
        round ko / slots; else the loop's mbarrier, phase ko), then a barrier that makes the
        copies the threads made visible to every thread. Before a pipelined K loop's head
        stages the barrier is kept even for TMA copies alone (it also tells that every thread
        is done reading the slot those stages refill) unless the group is an mbarrier ring,
        whose empty barriers tell it."""
        kinds, bars, pending = set(), [], 0
        j = i + 1
        while j < len(body) and isinstance(body[j], StageCopy):
            j += 1
        nxt = body[i + 1:j]
        nxt_plans = [self.plan(c) for c in nxt]
        refill = bool(nxt) and any(c.stage.name in w.wait.stages for c in nxt) and \
            is_pipelined([c.stage for c in nxt], nxt_plans)
        guarded = refill and is_mbarrier_ring([c.stage for c in nxt], nxt_plans)
        for name in w.wait.stages:
            c = self._lookup(name)
            p = self.plan(c)
            kinds.add(p.kind)
            if refill and p.kind == "async":
                pending = max(pending, p.slots - 2)
            if p.kind == "tma":
                wait = ring.landed(p.loop, is_pipelined([c.stage], [p]), round_of(p, "cur"), slot_of(p, "cur"),
                                   iteration(p))
                if wait not in bars:
                    bars.append(wait)
        out: list = []
        if "async" in kinds:
            out.append(CpAsyncWait(pending))
        out += bars
        if (refill and not guarded) or kinds & {"async", "sync"} or unsynced:
            out.append(K.Barrier())
        return out

    def prologue(self, pro: StagePrologue) -> list:
        """Before a K loop: the mbarriers of its TMA stages and, when pipelined, the copies
        of the first `prefetch` tiles (one cp.async group each)."""
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
            guarded = is_mbarrier_ring(stages, plans)
            out += ring.inits(loop, ahead, guarded, m.threads, plans[0].slots)
            if guarded:
                self.rings[loop.var] = plans[0]      # its K loop ends by releasing the slot
        if ahead and variable_start(loop):
            out += self._guarded_prologue(m, stages, plans)
        elif ahead:
            depth = min(plans[0].prefetch, loop_stop(loop) - loop_start(loop).const)
            if depth == 1:
                out.append(K.Comment(f"prologue: issue the copies of K tile {loop.var} = 0"))
                out += self._issue(m, stages, plans, 0)
            else:                      # tiles 0 .. depth - 1 into slots 0 .. depth - 1
                tiles = PrologueTiles(f"{loop.var}_pre", depth)
                out.append(K.Comment(f"prologue: issue the copies of K tiles {loop.var} = 0 .. {depth - 1}"))
                out.append(K.For(tiles.var, K.Const(0, "int"), K.Const(depth, "int"), K.Const(1, "int"),
                                 tuple(self._issue(m, stages, plans, tiles)), True))
            if plans[0].slots > 2 and any(p.kind == "async" for p in plans):
                out += [CpAsyncCommit()] * (plans[0].prefetch - depth)    # wait_group counts them
        return out

    def _guarded_prologue(self, m, stages, plans) -> list:
        """A ring whose loop starts at an index of the block (causal keys: n = stop - start
        trips): tile j < prefetch issued where j < n, min(prefetch, n) slots filled; every
        tile commits a cp.async group, even empty, so wait_group counts alike in every block."""
        loop, depth = plans[0].loop, plans[0].prefetch
        start = loop_start(loop)
        tiles = PrologueTiles(f"{loop.var}_pre", depth) if depth > 1 else 0
        first = start + var(tiles.var) if depth > 1 else start
        body = (K.If(K.Binary("<", affine_expr(first), K.Const(loop_stop(loop), "int")),
                     tuple(self._issue(m, stages, plans, tiles, commit=False))),)
        body += (CpAsyncCommit(),) if any(q.kind == "async" for q in plans) else ()
        if depth > 1:
            body = (K.For(tiles.var, K.Const(0, "int"), K.Const(depth, "int"), K.Const(1, "int"), body, True),)
        what = f"the first {depth} K tiles" if depth > 1 else "the first K tile"
        return [K.Comment(f"prologue: issue {what} from {loop.var} = {start}, those before {loop_stop(loop)}"),
                *body]

    def _steady(self, m, stages, plans) -> list:
        """The pipelined head of iteration ko, after its AsyncWait (tile ko has landed, the
        barrier passed): issue tile ko + prefetch into slot (ko + prefetch) % slots. With
        more than two slots the cp.async group is committed even when empty, so that
        wait_group slots - 2 always counts the same groups."""
        p = plans[0]
        loop, d = p.loop, p.prefetch
        out: list = []
        nxt = K.Binary("<", K.Binary("+", K.Var(loop.var), K.Const(d, "int")), K.Const(loop_stop(loop), "int"))
        ahead = f"{loop.var} + {d}"
        out.append(K.Comment(f"steady state: issue K tile {ahead} while tile {loop.var} computes"))
        uniform_commit = p.slots > 2 and any(q.kind == "async" for q in plans)
        out.append(K.If(nxt, tuple(self._issue(m, stages, plans, "next", commit=not uniform_commit))))
        if uniform_commit:
            out.append(CpAsyncCommit())
        return out

    def _issue(self, m, stages, plans, it, commit=True) -> list:
        out: list = []
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        if tma:
            before = []
            if it == "next" and is_mbarrier_ring(stages, plans):    # wait for the slot's release
                p = tma[0][1]
                before.append(ring.refill_wait(p.loop, round_of(p, it), slot_of(p, it)))
            out += issue_tma(m, tma, it, before)
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        for s, p in asyncs:
            out += copy_stage(m, s, p, it)
        if asyncs and commit:
            out.append(CpAsyncCommit())
        return out
