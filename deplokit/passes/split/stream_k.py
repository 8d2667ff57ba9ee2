"""Stream-K, dealt as the lowering starts (003 reduce=stream_k: grid_plan.StreamKPlan).

003 split the matmul's K into S splits and recorded stream-K's worker count on its SplitK;
the later passes scheduled it as any in-kernel split: S x T blocks, each a tile's split, the
last of a tile's S adding the partials. Where T x S blocks leave SMs idle (148 tiles on 132
SMs) stream-K deals the I = T x C iterations (C = S x R K chunks a tile) out evenly instead:
worker w runs iterations start(w) = floor(w I / W) .. start(w + 1) - 1 of the flat order
(tile g // C, chunk g % C), accumulating in registers across a tile's chunks and flushing a
partial where its run leaves a tile. This module rewrites the scheduled Tile into that form
before k001 materialises it; it decides nothing (the plan is 003's, the tile 005/008's).

    before (S splits of R chunks, T = B0 x B1 tiles)
    Tile(axes=(threads..., a2s(K):S=BLOCK, a0b(M):B0=BLOCK, a1b(N):B1=BLOCK)):
        for a2o in 0..R:  # reduce (K): stages at tile (a0b, a1b), chunk a2s * R + a2o
            ...FFMA into acc
        partials[a2s, ...] = acc
        SplitArrive(counter[tile], of S along a2s)
        acc_s = partials[0] + ... + partials[S - 1], the epilogue, the output's store

    after (W workers of `trips` iterations, g = start(a2w) + a2o)
    Tile(axes=(threads..., a2w(K):W=BLOCK)):
        for a2o in 0..trips:  # reduce (K): stages at tile g // C, chunk g % C
            ...FFMA into acc
            StreamKFlush(the tile's last chunk, or the worker's last iteration):
                partials[a2w - first(g // C), ...] = acc     # the segment's index in its tile
                SplitArrive(counter[g // C], of segments(g // C))
                acc_s = partials[0] + ... in order, where s < segments(g // C); the epilogue
                acc = 0

A worker that owns `run` iterations where the others own `run` + 1 runs one more (the loop
has one static trip count, and so the ring of stages before it): its copies read the next
worker's first chunk (g is taken modulo I, so the last worker's stays inside the operands)
and nothing flushes it. The segments of a tile are added in segment order, whoever arrives
last: the sum is bit-identical run to run. first(t) and segments(t) are integer arithmetic on
the plan's constants (StreamKPlan.owner), the same in every block."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.companions import SplitArrive, StreamKFlush
from ...ir.index import Affine, const, floordiv, mod, var
from ...ir.kernel_expr import affine_expr
from ...ir.loop_ir import Assign, Compute, Load, Loop
from ...ir.names import fresh_name
from ...ir.stages import global_index
from ...ir.stream_k import StreamKPlan, accumulator, dealt, leading_stages
from ...ir.substitute import substitute_body
from ...ir.tile_ir import BLOCK, THREAD, Stage, Tile, TileAxis, TileKernel, map_body, used_vars
from ..record import replace_tile


def deal(kernel: TileKernel) -> tuple[TileKernel, StreamKPlan] | str:
    """`kernel` (003's stream-K split, scheduled) with its K chunks dealt to the workers of
    its plan (ir.stream_k.dealt), and the plan; or why it cannot be (it then runs as the
    in-kernel split it also is)."""
    plan = dealt(kernel)
    if isinstance(plan, str):
        return plan
    split, tile = kernel.split_k, kernel.tile()
    body = tile.body
    arrive = next(s for s in body if isinstance(s, SplitArrive))
    lead = leading_stages(body)
    loop, at = body[len(lead)], body.index(arrive)
    body = _unstaged(body, {st.name: st for st in lead if isinstance(st, Stage)})
    tile_axes = [a for a in tile.axes if a.kind != THREAD and a.var != arrive.split]
    taken = used_vars(kernel.body)
    worker = fresh_name(arrive.split[:-1] + "w", taken)
    ranges = {worker: plan.workers, loop.var: plan.trips}
    I, W, C = plan.iterations, plan.workers, plan.chunks
    g = floordiv(var(worker) * I, W, ranges) + var(loop.var)
    # the iterations a worker runs past its own read the next worker's (the last one's: wrap to 0)
    read = mod(g, I, ranges) if plan.trips * W > I else g
    in_loop = {arrive.split: const(0), loop.var: mod(read, C, ranges),
               **_tile_coordinates(floordiv(read, C, ranges), tile_axes, ranges)}
    tile_at = floordiv(g, C, ranges)
    first, last = _owner(tile_at * C, plan, ranges), _owner(tile_at * C + (C - 1), plan, ranges)
    segments = last - first + 1
    at_flush = {arrive.split: var(worker) - first, **_tile_coordinates(tile_at, tile_axes, ranges)}
    stored = substitute_body(body[len(lead) + 1:at], at_flush, ranges)
    added = substitute_body(body[at + 1:], at_flush, ranges)
    added = _in_order(added, split.workspace, plan.slots, segments, taken)
    owned = floordiv(var(worker) * I + I, W, ranges) - floordiv(var(worker) * I, W, ranges)
    flush = StreamKFlush(loop.var, owned, mod(g, C, ranges), C,
                         stored + (SplitArrive(arrive.counter, arrive.split, plan.slots, tile_at, segments),) + added,
                         _reset(kernel, loop, accumulator(kernel), taken))
    # never unrolled: each iteration ends in a flush (016 may have unrolled a short split's loop)
    dealt_loop = Loop(loop.var, plan.trips, loop.kind, substitute_body(loop.body, in_loop, ranges) + (flush,),
                      loop.role, False)
    axes = tuple(a for a in tile.axes if a.kind == THREAD) + (TileAxis(worker, W, BLOCK, "K"),)
    return replace_tile(kernel, Tile(axes, (dealt_loop,))), plan


def _unstaged(body, stages: dict) -> tuple:
    """`body` reading the elements of `stages` (the epilogue's operands staged before the K
    loop, at the block's tile) from global memory, where a worker's tile is the segment's."""
    if not stages:
        return body

    def load(s):
        if isinstance(s, Load) and s.tensor in stages:
            st = stages[s.tensor]
            return dataclasses.replace(s, tensor=st.tensor, index=global_index(st, s.index), pad=0.0)
        return s
    return map_body(body, load)


def _tile_coordinates(index: Affine, axes, ranges) -> dict:
    """The block coordinates of output tile `index` (the axes in launch order, the last fastest)."""
    out, stride = {}, 1
    for a in reversed(axes):
        q = floordiv(index, stride, ranges) if stride > 1 else index
        out[a.var] = mod(q, a.extent, ranges) if a is not axes[0] else q
        stride *= a.extent
    return out


def _owner(g: Affine, plan: StreamKPlan, ranges) -> Affine:
    """StreamKPlan.owner as an index: the worker whose run holds iteration g."""
    return floordiv(g * plan.workers + (plan.workers - 1), plan.iterations, ranges)


def _in_order(body, workspace: str, slots: int, segments: Affine, taken: set) -> tuple:
    """`body` (003's sum of the split partials, then the epilogue) summing `slots` partials
    instead, each past the first added where its segment exists (s < segments): in segment
    order, under the name the epilogue reads."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            out.append(Loop(s.var, s.extent, s.kind, _in_order(s.body, workspace, slots, segments, taken),
                            s.role, s.unroll, s.stop))
            continue
        out.append(s)
    chain = [s for s in out if isinstance(s, Load) and s.tensor == workspace]
    if not chain:
        return tuple(out)
    parts, total = {s.dst for s in chain[1:]}, chain[0].dst
    for s in out:                          # 003's adds (t003._sum_partials): p0 + p1, then + p2, ...
        if isinstance(s, Compute) and s.op == "add" and len(s.args) == 2 and s.args[0] == total \
                and s.args[1] in parts:
            parts.discard(s.args[1])
            total = s.dst
            chain.append(s)
    total_name, dtype = chain[-1].dst, next((s.dtype for s in chain if isinstance(s, Compute)), "float32")
    rest = chain[0].index[1:]

    def fresh(base):
        name = fresh_name(base, taken)
        taken.add(name)
        return name

    summed, total = [], None
    for k in range(slots):
        part = total_name if slots == 1 else fresh(f"{total_name}_p")
        summed.append(Load(part, workspace, (const(k),) + rest))
        if total is None:
            total = part
            continue
        inside, plus = fresh(f"{total_name}_in"), fresh(f"{total_name}_add")
        new = total_name if k == slots - 1 else fresh(f"{total_name}_s")
        summed += [Compute(inside, "less", (const(k), segments), dtype="bool"),
                   Compute(plus, "add", (total, part), dtype=dtype),
                   Compute(new, "where", (inside, plus, total), dtype=dtype)]
        total = new
    first = out.index(chain[0])
    kept = [s for s in out if s not in chain]
    return tuple(kept[:first] + summed + kept[first:])


def _reset(kernel: TileKernel, loop: Loop, acc: str, taken: set) -> tuple:
    """Statements that zero the accumulator (every element of its register tile)."""
    tile = kernel.register_tile(acc)
    if tile is None:
        return (Assign(acc, 0.0),)
    names = []
    for d in range(len(tile.shape)):
        names.append(fresh_name(f"{loop.var[:-1]}z{d}", taken))
        taken.add(names[-1])
    stmt = Assign(acc, 0.0, tuple(var(n) for n in names))
    for n, extent in reversed(list(zip(names, tile.shape))):
        stmt = Loop(n, extent, "register", (stmt,), "", True)
    return (stmt,)


def lower_flush(m, s: StreamKFlush) -> list:
    """k001's spelling of a StreamKFlush: an if on the segment's end (block-uniform: the worker
    and its iteration), its statements (SplitArrive's the rest in the last block), the reset."""
    step = K.Var(s.step)
    owned = affine_expr(s.owned)
    ends = K.Binary("||", K.Binary("==", affine_expr(s.chunk), K.Const(s.chunks - 1, "int")),
                    K.Binary("==", K.Binary("+", step, K.Const(1, "int")), owned))
    cond = K.Binary("&&", K.Binary("<", step, owned), ends)
    return [K.If(cond, tuple(m.stmts(s.body) + m.stmts(s.reset)))]


# Tile-IR statement -> k001's lowering of it (k001_materialize.FEATURE_STATEMENTS)
LOWERINGS = {StreamKFlush: lower_flush}
