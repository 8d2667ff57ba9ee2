"""Stage, AsyncWait -> Kernel IR: the copy of a slab into shared memory, and the point where
asynchronous copies land (materialize's `_stage`, `_async_wait`).

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
from ...ir.index import bounds, const, floordiv, mod, substitute, var
from ...ir.loop_ir import Loop
from ...ir.tile_ir import AsyncWait, Stage
from ..stage_geometry import VECTOR, dim_multipliers, row_major_strides, rows, tma_plan
from .smem_layout import PlacedStage, smem_size


def _tid0():
    return K.Binary("==", K.Special("tid.x"), K.Const(0, "int"))


def _plus(base, e):
    if base is None:
        return e
    if isinstance(e, K.Const) and e.value == 0:
        return base
    return K.Binary("+", base, e)


def _cooperative(i: str, count: int, threads: int, body) -> list:
    """Units 0..count-1 dealt out to the block's threads: a strided loop, or (one unit or
    none per thread) a plain guarded block, which keeps no loop state alive (ptxas otherwise
    spills around small copies in register-tight kernels)."""
    tid = K.Special("tid.x") if threads > 1 else K.Const(0, "int")
    if count > threads:
        return [K.For(i, tid, K.Const(count, "int"), K.Const(threads, "int"), tuple(body))]
    stmts = (K.Declare(i, "int", tid),) + tuple(body)
    if count == threads:
        return list(stmts)
    return [K.If(K.Binary("<", tid, K.Const(count, "int")), stmts)]


@dataclasses.dataclass(frozen=True)
class _Plan:
    kind: str                 # sync | async | tma, after the materialiser's checks
    buffered: bool            # two buffers, ping-pong on the loop variable
    loop: object              # the enclosing Loop (None at the top of the tile)
    top: bool                 # the loop statement is at the top of the tile (runs once)


class StageCopier:
    """The stage-copy half of a _Materializer `m` (which owns types, ranges, threads, stages)."""

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
            from ...ir.tile_ir import walk
            self.by_name = {}
            for st, loops in walk(self.m.tile.body):
                if isinstance(st, Stage):
                    info = (loops[-1], len(loops) - 1) if loops and isinstance(loops[-1], Loop) else None
                    self.by_name.setdefault(st.name, (st, info))
        if name not in self.by_name:
            raise ValueError(f"{self.m.kernel.name}: AsyncWait names {name}, which is no stage of the kernel")
        return self.by_name[name]

    # -- planning -----------------------------------------------------------------------------
    def _ranges(self, loop) -> dict:
        """Variable ranges inside the loop: the same before it (prologue) and in it, so that
        every decision about a stage's copy is the same wherever its copy is issued."""
        ranges = dict(self.m.ranges)
        if loop is not None:
            ranges[loop.var] = loop.extent
        return ranges

    def plan(self, s: Stage, loop_info) -> _Plan:
        """How stage s is copied, after the checks only the materialiser can make (dtype,
        padded rows, loop nesting): a stage the Tile IR asks to copy with TMA that no longer
        allows it is copied with cp.async, in the same schedule."""
        t = self.m.types[s.tensor]
        loop, depth = loop_info if loop_info else (None, None)
        top = loop is not None and depth == 0
        buffered = s.buffers == 2 and top
        kind = s.copy
        if t.dtype != "float32":
            kind = "sync"
        if kind == "tma" and (not buffered or tma_plan(s, t.shape, self._ranges(loop))[2]):
            kind = "async"
        return _Plan(kind, buffered, loop, top)

    def _pipelined(self, stages, plans) -> bool:
        return all(s.prefetch and p.buffered and p.kind in ("async", "tma") and p.loop.extent >= 2
                   for s, p in zip(stages, plans))

    def _bar(self, loop) -> str:
        return f"{loop.var}_mbar"

    def _register(self, s: Stage, p: _Plan) -> list:
        """Declare the shared array (once) and record the stage for the loads that follow."""
        m = self.m
        m._note_read(s.tensor)
        out = [] if m._declared(s.name) else [K.SharedArray(s.name, smem_size(s) * (2 if p.buffered else 1))]
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
        pipelined = self._pipelined(stages, plans)
        self._check_awaited(stages, plans, body[:i] if pipelined else body[j:], pipelined)
        out: list = []
        for s, p in zip(stages, plans):
            out += self._register(s, p)
        if pipelined:
            return out + self._steady(stages, plans)
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        syncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "sync"]
        if self.m.loop_depth and (tma or any(not p.buffered for p in plans)):
            out.append(K.Barrier())           # the previous iteration's readers are done
        it = "cur" if loop_info else None
        if tma:
            out += self._issue_tma(tma, it)
        for s, p in asyncs:
            out += self._copy(s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        for s, p in syncs:
            out += self._copy(s, p, it)
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
            self._pipelined(nxt, [self.plan(s, info) for s in nxt])
        out: list = []
        if "async" in kinds:
            out.append(K.CpAsyncWait(0))
        for loop in bars:
            out.append(K.MbarrierWait(self._bar(loop), K.Var(loop.var)))
        if refill or kinds & {"async", "sync"} or id(w) in self.unsynced:
            out.append(K.Barrier())
        return out

    def prologue(self, loop, depth) -> list:
        """Before a K loop: the mbarrier of its TMA stages and, when pipelined, the first
        tile's copies."""
        from ..stage_geometry import head_stages
        stages = head_stages(loop)
        if not stages:
            return []
        plans = [self.plan(s, (loop, depth)) for s in stages]
        tma = [(s, p) for s, p in zip(stages, plans) if p.kind == "tma"]
        pipelined = self._pipelined(stages, plans)
        out: list = []
        if pipelined:
            for s, p in zip(stages, plans):
                if not self.m._declared(s.name):
                    out.append(K.SharedArray(s.name, smem_size(s) * 2))
        if tma:
            count = sum(self._tma_runs(s, p)[2] for s, p in tma)
            out += [K.MbarrierInit(self._bar(loop), count), K.Barrier()]
        if pipelined:
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
            out += self._issue_tma(tma, it)
        asyncs = [(s, p) for s, p in zip(stages, plans) if p.kind == "async"]
        for s, p in asyncs:
            out += self._copy(s, p, it)
        if asyncs:
            out.append(K.CpAsyncCommit())
        return out

    # -- one iteration's view of a stage ----------------------------------------------------------
    def _at(self, s: Stage, p: _Plan, it):
        """(origin, buffer base or None, ranges) of the copy for iteration `it` of the loop:
        cur (the loop variable), zero (the prologue, before the loop), next (ko + 1, issued
        under ko + 1 < n), None (a stage outside any loop)."""
        loop = p.loop
        ranges = self._ranges(loop)
        size = smem_size(s)
        if it is None or loop is None:
            return s.origin, None, ranges
        ko = loop.var
        if it == "cur":
            base = K.Binary("*", K.Binary("%", K.Var(ko), K.Const(2, "int")), K.Const(size, "int"))
            return s.origin, (base if p.buffered else None), ranges
        if it == "zero":
            return tuple(substitute(o, {ko: const(0)}) for o in s.origin), None, ranges
        ranges[ko] = loop.extent - 1           # ko + 1 < n
        origin = tuple(substitute(o, {ko: var(ko) + 1}) for o in s.origin)
        base = K.Binary("*", K.Binary("%", K.Binary("+", K.Var(ko), K.Const(1, "int")), K.Const(2, "int")),
                        K.Const(size, "int"))
        return origin, (base if p.buffered else None), ranges

    def _units(self, s: Stage, origin, ranges, unit: int, merged: int, flat: str):
        """Copy units of `unit` floats (spanning the last `merged` slab axes when merged > 1):
        (count, shared offset Affine, per-dim global index Affines, per-dim unit extent,
        ranges with the flat unit index)."""
        slab, shape = s.slab, self.m.types[s.tensor].shape
        n = len(slab)
        mult = dim_multipliers(slab)
        sshape = [ax.extent for ax in slab]
        sshape[-1] += s.pad
        sstr = row_major_strides(sshape)
        axes = [(slab[k].extent, slab[k].dim, mult[k], sstr[k]) for k in range(n - merged)]
        unit_ext = [1] * len(shape)
        for ax in slab[n - merged:]:
            unit_ext[ax.dim] *= ax.extent
        if merged == 1 and unit < slab[-1].extent:
            axes.append((slab[-1].extent // unit, slab[-1].dim, unit * mult[-1], unit * sstr[-1]))
            unit_ext[slab[-1].dim] = unit
        count = 1
        for a in axes:
            count *= a[0]
        ranges = dict(ranges)
        ranges[flat] = count
        f = var(flat) if count > 1 else const(0)     # one unit: no loop, no index variable
        coords, inner = [], 1
        for ext, *_ in reversed(axes):
            c = floordiv(f, inner, ranges)
            if inner * ext < count:
                c = mod(c, ext, ranges)
            coords.append(c)
            inner *= ext
        coords.reverse()
        g = list(origin)
        for c, (ext, d, step, _) in zip(coords, axes):
            g[d] = g[d] + c * step
        # units enumerate the slab row-major, so in shared memory unit f sits at row
        # f // per_row, column (f % per_row) * unit of the padded rows
        E = slab[-1].extent
        if merged > 1:
            smem = f * unit
        elif unit < E:
            per_row = E // unit
            smem = floordiv(f, per_row, ranges) * (E + s.pad) + mod(f, per_row, ranges) * unit
        else:
            smem = f * (E + s.pad)
        return count, smem, g, unit_ext, ranges

    def _global(self, s: Stage, g, unit_ext, ranges):
        """(flat offset with every index clamped inside the tensor, in-bounds condition or
        None when every unit is provably inside)."""
        from .materialize import _flat, affine_expr
        shape = self.m.types[s.tensor].shape
        exprs, cond = [], None
        for d, (e, extent) in enumerate(zip(g, shape)):
            x = affine_expr(e)
            b = bounds(e, ranges)
            if b is None or b[1] + unit_ext[d] > extent:
                c = K.Binary("<", x, K.Const(extent, "int"))
                cond = c if cond is None else K.Binary("&&", cond, c)
                x = K.Binary("min", x, K.Const(extent - unit_ext[d], "int"))
            exprs.append(x)
        return _flat(exprs, shape), cond

    def _vector(self, s: Stage, p: _Plan) -> bool:
        """16-byte units: float4 for a sync copy, cp.async 16 (which also needs 16-byte
        aligned shared rows) for an async one."""
        t = self.m.types[s.tensor]
        if t.dtype != "float32" or not rows(s, t.shape, self._ranges(p.loop)).vector:
            return False
        return p.kind != "async" or (s.slab[-1].extent + s.pad) % VECTOR == 0

    def _copy(self, s: Stage, p: _Plan, it) -> list:
        """The block's threads copy one stage (sync or cp.async) for one iteration."""
        from .materialize import affine_expr
        origin, base, ranges = self._at(s, p, it)
        unit = VECTOR if self._vector(s, p) else 1
        i = f"{s.name}_i"
        count, smem, g, unit_ext, ranges = self._units(s, origin, ranges, unit, 1, i)
        src, cond = self._global(s, g, unit_ext, ranges)
        dst = _plus(base, affine_expr(smem))
        zero = K.Const(0.0)
        if p.kind == "async":
            body = [K.CpAsync(s.name, dst, s.tensor, src, 4 * unit)]
            if cond is not None:       # past the end: an ordinary store of zeros
                zeros = [K.SharedStore(s.name, dst, zero)] if unit == 1 else \
                    [K.VectorStore("shared", s.name, dst, (zero,) * 4)]
                body = [K.If(cond, tuple(body), tuple(zeros))]
        elif unit == 1:
            value = K.GlobalLoad(s.tensor, src, "float")
            if cond is not None:
                value = K.Select(cond, value, zero)
            body = [K.SharedStore(s.name, dst, value)]
        else:
            regs = tuple(f"{s.name}_v{j}" for j in range(4))
            vals = tuple(K.Var(r) if cond is None else K.Select(cond, K.Var(r), zero) for r in regs)
            body = [K.VectorLoad(regs, "global", s.tensor, src)]
            if (s.slab[-1].extent + s.pad) % VECTOR == 0:
                body.append(K.VectorStore("shared", s.name, dst, vals))
            else:                      # padded rows: 16-byte global load, 4-byte shared stores
                body += [K.SharedStore(s.name, _plus(dst, K.Const(j, "int")) if j else dst, v)
                         for j, v in enumerate(vals)]
        return _cooperative(i, count, self.m.threads, body)

    def _tma_runs(self, s: Stage, p: _Plan):
        """(run floats, merged axes, runs per copy)."""
        run, axes, _ = tma_plan(s, self.m.types[s.tensor].shape, self._ranges(p.loop))
        n = 1
        for ax in s.slab[:len(s.slab) - axes]:
            n *= ax.extent
        return run, axes, n

    def _issue_tma(self, tma, it) -> list:
        """Thread 0 issues one bulk copy per run of every TMA stage."""
        from .materialize import affine_expr
        body: list = []
        for s, p in tma:
            run, axes, _ = self._tma_runs(s, p)
            origin, base, ranges = self._at(s, p, it)
            r = f"{s.name}_r"
            count, smem, g, unit_ext, ranges = self._units(s, origin, ranges, run, axes, r)
            src, _ = self._global(s, g, unit_ext, ranges)     # runs past the end: clamped
            dst = _plus(base, affine_expr(smem))
            load = K.TmaLoad(s.name, dst, s.tensor, src, run, self._bar(p.loop))
            body.append(load if count == 1 else K.For(r, K.Const(0, "int"), K.Const(count, "int"),
                                                      K.Const(1, "int"), (load,)))
        return [K.If(_tid0(), tuple(body))]
