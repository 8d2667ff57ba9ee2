"""003 split_matmul_k: promote the K-outer chunk loop into a grid dimension (split-K).

A matmul with few outputs and a long K (an LLM projection at decode or short prefill: M of
1..128 rows, K in the thousands) launches too few blocks to fill the GPU, and each block
walks the whole of K alone. Split-K gives the K-outer chunks to S blocks per output tile:
block s reduces chunks s*C .. s*C + C-1 (C = chunks / S) into a partial sum and stores it
into its own slice of a workspace; a second kernel (added by this pass, launched right
after) adds the S slices up in split order, then applies the epilogue once. No atomics:
the sum is the same float sum on every run and every GPU.

    before (nn.Linear(2048, 256) on 32 tokens)
    Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD)):
        for a2o in 0..128:  # reduce (K)
            for a2i in 0..16:  # reduce (K)
                in0 = load input[0, a0, a2o * 16 + a2i]
                in1 = load p_weight[a1, a2o * 16 + a2i]
                v0 = multiply(in0, in1)
                acc0 <- add(acc0, v0)
        in2 = load p_bias[a1]
        v1 = add(acc0, in2)  # epilogue (outside reduce)
        linear[0, a0, a1] = v1

    after (splits=32: 32 blocks per output tile, 4 chunks = 64 of K each)
    === merged_linear -> merged_linear_partials ===
    split-K 32 into merged_linear_partials, reduced by merged_linear_reduce  # deterministic
    Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD, a2s(K):32=BLOCK)):
        for a2o in 0..4:  # reduce (K)
            for a2i in 0..16:  # reduce (K)
                in0 = load input[0, a0, a2s * 64 + a2o * 16 + a2i]
                ...
        merged_linear_partials[a2s, 0, a0, a1] = acc0

    === merged_linear_reduce -> linear ===
    Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD)):
        ps0 = load merged_linear_partials[0, 0, a0, a1]
        ...
        ps31 = add(ps30, ...)
        in2 = load p_bias[a1]
        v1 = add(ps31, in2)  # epilogue (outside reduce)
        linear[0, a0, a1] = v1

Any epilogue works (bias, residual, activation): the reducer applies it once, to the whole
sum. A K tail (K % BK != 0, 002's `a2t` loop) is reduced by the reducer too, after the
partials. The workspace is a temporary of the program (the launch plan places it in the
scratch arena). Blockify (005) keeps the split axis as the slowest BLOCK axis and splits M
and N as usual; stage_inputs (007) stages each split's own chunks (origins `a2s * 64 + ...`);
the reducer is scheduled by the later passes like any elementwise kernel.

Default. splits = 1 when the output tiles fill the GPU's SMs: the block tiles of 005's
default thread shape and 008's default register block are counted (in blocks of 256
threads: as many warps in flight whatever the shape). Otherwise the split count, the thread
shape and the register block are planned together (grid_plan.py): among the splits in the
domain that divide the K chunks into runs of at least MIN_CHUNKS, and the default thread
shapes and register blocks, the cheapest grid that launches at least one block per SM, priced
by its DRAM bytes (the workspace's write and read-back included), the busiest SM's issue,
latency and the reducer; 005 and 008 then take that plan's shape and block for the split.
A split count need not divide the K chunks: the chunks past splits x (chunks // splits) go to
the reducer with the K tail (`leftover`, priced by the plan). A count that overhangs K
(grid_plan.split_run) does so only where every product past K is of loads provably outside
their tensors (zeros); a K inside a longer axis (x[:, 10:50], split_reduce's chunks) leaves
those chunks to the reducer instead, and the trace says why. An output of more than
SKINNY_ROWS rows, or a K loop under 8 x MIN_CHUNKS chunks (grid_plan.worth_filling), keeps
the default tiles and takes the fewest dividing splits
that fill the SMs (the most that leave MIN_CHUNKS chunks each if none does).

Balance (issue 26). Where that grid leaves the SMs unevenly loaded (SM balance = mean blocks
per SM / the busiest SM's under 0.90, fewer than 8 blocks per SM), grid_plan.decide takes the
cheapest balanced tile and split count instead (qwen gate_proj at 128 rows: 148 tiles of
128 x 128 on 132 SMs, 0.56, become 7 splits of them, 1036 blocks, 0.98); 005 and 008 read
the same decision, and the trace says the grid, its balance and why. Where no such grid is
within the slack, stream-K (`reduce=stream_k`, also of one split) deals the grid's tiles x K
chunks to as many workers as the SMs hold evenly, where grid_plan.stream_k_price prices it
under the grid (an FP32 grid, issue-bound; not a memory-bound half one, whose partials only
add bytes): the split is recorded with its workers (SplitK.workers) and the lowering deals
the scheduled kernel (passes/split/stream_k.py; docs/cost_model.md).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...analysis.occupancy import balanced
from ...ir.companions import SplitArrive, SplitK
from ...ir.index import bounds, const, floordiv, mod, substitute, var
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.ops import OPS
from ...ir.substitute import substitute_body
from ...ir.tile_ir import BLOCK, Tile, TileAxis, TileKernel, used_vars, walk
from ...ir.types import Buffer, TensorType, value_dtype
from ..record import KernelPass, Knob, Noted, PassContext, Skip, fresh_name, replace_tile
from .grid_plan import (
    FACTOR_SPLITS,
    FULL_BLOCK,
    MIN_CHUNKS,
    SHORT_CHUNKS,
    SPLITS,
    WORD,
    block_geometry,
    decide_for,
    default_blocks,
    mma_kind,
    old_splits,
    output_extents,
    reduce_choice,
    sm_count,
    split_run,
    stream_k_plan,
    stream_k_price,
    thread_tiles,
)

DESCRIPTION = "promote the K-outer chunk loop into a grid dimension"


class _Matmul:
    """The parts of a chunked matmul Tile split-K rewrites, or why it cannot."""

    def __init__(self, kernel: TileKernel, types=None):
        self.kernel = kernel
        self.types = types          # tensor name -> TensorType; None in a knob's default (no program)
        self.reason = ""
        try:
            self.tile = tile = kernel.tile()
        except ValueError:
            self.reason = "no Tile"
            return
        if kernel.locals:
            self.reason = "the kernel keeps rows on chip (locals)"
            return
        outer = [s for s in tile.body if isinstance(s, Loop) and s.role == "K"]
        self.outer = next((lp for lp in outer if any(isinstance(c, Loop) and c.role == "K" for c in lp.body)), None)
        if self.outer is None:
            self.reason = "no chunked matmul K loop (002 did not chunk K)" if not outer else "K is not chunked"
            return
        if any(a.kind == BLOCK for a in tile.axes):
            self.reason = "already split" if any(a.role == "K" for a in tile.axes) else "already has BLOCK axes"
            return
        inner = next(c for c in self.outer.body if isinstance(c, Loop) and c.role == "K")
        self.chunks, self.bk = self.outer.extent, inner.extent
        tail_var = self.outer.var[:-1] + "t"          # 002's name for the K % BK tail loop
        self.tail = [lp for lp in outer if lp.var == tail_var]
        if len(outer) > 1 + len(self.tail):
            self.reason = f"{len(outer) - len(self.tail)} K reductions in one kernel (fused matmuls)"
            return
        at = tile.body.index(self.outer)
        self.prologue = tile.body[:at]
        self.epilogue = tuple(s for s in tile.body[at + 1:] if s not in self.tail)
        if any(not isinstance(s, (Load, Compute, Store)) for s in self.prologue + self.epilogue):
            self.reason = "the K loop is not the kernel's only loop"
            return
        stores = [s for s, _ in walk(tile.body) if isinstance(s, Store)]
        if len(stores) != 1 or stores[0] not in self.epilogue:
            self.reason = f"{len(stores)} stores: split-K reduces into exactly one output"
            return
        self.store = stores[0]
        if any(isinstance(s, Load) and s.tensor == self.store.tensor for s, _ in walk(tile.body)):
            self.reason = f"the kernel reads its output {self.store.tensor}"
            return
        accs = {s.acc: s.reduction for s, _ in walk(self.outer.body) if isinstance(s, Accumulate)}
        if len(accs) != 1 or any(r != "sum" for r in accs.values()):
            self.reason = "the K reduction is not one sum"
            return
        self.acc = next(iter(accs))


def _thread_tiles(tile: Tile, sm_count: int) -> float:
    """grid_plan.thread_tiles of the Tile's output: blocks of FULL_BLOCK threads unsplit."""
    extents, other = output_extents(tile)
    return thread_tiles(extents["M"], extents["N"], other, sm_count)


def _grid_target(target) -> int:
    return sm_count(target)


def _decision(mm: _Matmul, target):
    extents, other = output_extents(mm.tile)
    return decide_for(mm.kernel, extents["M"], extents["N"], mm.chunks, mm.bk, target, other)


def _default_splits(kernel: TileKernel, target) -> int:
    mm = _Matmul(kernel)
    if mm.reason:
        return 1
    planned, _ = _decision(mm, target)
    if planned is not None:
        return planned.splits
    extents, other = output_extents(mm.tile)
    return old_splits(extents["M"], extents["N"], mm.chunks, other, target)


def _tiles(mm: _Matmul, splits: int, target) -> int:
    """Output tiles of the split grid at the default thread shape and register block (the
    grid plan's where it decided the grid): the blocks that run an in-kernel reduction."""
    extents, other = output_extents(mm.tile)
    planned, _ = _decision(mm, target)
    if planned is not None and planned.splits == splits:
        return planned.blocks // splits
    return default_blocks(extents["M"], extents["N"], other, splits, target) // splits


def _past_k_reads_zero(mm: _Matmul, over: int) -> str:
    """Why reading `over` chunks past the K chunks might not add zeros ("" when it adds them):
    every product the K loop accumulates there must be of zero-padded loads provably outside
    their tensor. A K loop whose index starts inside a longer axis (a slice x[:, 10:50], or a
    chunk of split_reduce's rows, a2s * 64 + k) would read the next elements instead."""
    inner = next(c for c in mm.outer.body if isinstance(c, Loop) and c.role == "K")
    ko, ki, bk = mm.outer.var, inner.var, mm.bk
    rest = sum(lp.extent for lp in mm.tail)       # 002's K % BK tail: real products the overhang reads
    axes = {a.var: a.extent for a in mm.tile.axes}
    # the K positions past the end as boxes of (chunk, lane): the rest of the tail's chunk, then whole chunks
    boxes = [({ko: const(mm.chunks), ki: const(rest) + var(ki)}, {ki: bk - rest})] if rest else []
    first = mm.chunks + (1 if rest else 0)
    if mm.chunks + over > first:
        boxes.append(({ko: const(first) + var(ko)}, {ko: mm.chunks + over - first, ki: bk}))
    defs = {s.dst: s for s, _ in walk(inner.body) if isinstance(s, (Load, Compute))}

    def outside(load: Load, mapping, ranges) -> bool:
        shape = mm.types[load.tensor].shape
        for d, e in enumerate(load.index):
            b = bounds(substitute(e, mapping), {**axes, **ranges})
            if b is not None and (b[0] >= shape[d] or b[1] < 0):
                return True
        return False

    def past_end(name):
        """The value `name` takes past K: 0.0 for a zero-padded load outside its tensor there,
        its op on those values for a computed one whose every leaf is such a load or a constant
        (a staged SwiGLU prologue: silu(0) * 0), else None (a real element may be read)."""
        d = defs.get(name)
        if isinstance(d, Load):
            return 0.0 if d.pad in (None, 0, 0.0) and all(outside(d, m, r) for m, r in boxes) else None
        if not isinstance(d, Compute) or d.op not in OPS or OPS[d.op].numpy is None:
            return None
        args = [past_end(a) if isinstance(a, str) else a for a in d.args]
        if any(a is None or isinstance(a, bool) or not isinstance(a, (int, float)) for a in args):
            return None
        with np.errstate(all="ignore"):
            value = OPS[d.op].numpy(*(np.float32(a) for a in args))
        return float(value) if np.ndim(value) == 0 and np.isfinite(value) else None

    accs = [s for s, _ in walk(inner.body) if isinstance(s, Accumulate)]
    if mm.types is None or all(past_end(a.value) == 0.0 for a in accs):   # no types: apply() decides
        return ""
    return "the K loop's loads past its end are not provably outside their tensors (a K offset into a longer axis)"


def _split_run(mm: _Matmul, splits: int) -> tuple[int, int, str]:
    """grid_plan.split_run, except that a split overhangs only where the reads past K are
    zeros (else the chunks past splits x (chunks // splits) are the reducer's); and why not."""
    run, over = split_run(mm.chunks, splits)
    why = _past_k_reads_zero(mm, over) if over else ""
    if why:
        return mm.chunks // splits, 0, why
    return run, over, ""


def _in_kernel_blocker(mm: _Matmul, splits: int) -> str:
    """Why the last block cannot add the partials itself ("" when it can): K products that no
    split reduces (002's K tail, chunks past splits x (chunks // splits)) are the reducer's."""
    run, over, _ = _split_run(mm, splits)
    left = mm.chunks - splits * run
    if (mm.tail and not over) or left > 0:      # an overhang absorbs 002's K tail
        what = "a K tail" if mm.tail else f"{left} leftover K chunks"
        return f"reducer: {what} to reduce besides the partials"
    return ""


def _reduce_decision(mm: _Matmul, splits: int, target) -> tuple[str, str]:
    """(in_kernel | reducer, why) for `splits` splits of the matmul: the reducer where the
    last block cannot add the partials itself, else the cheaper of the two by
    grid_plan.reduce_choice."""
    blocker = _in_kernel_blocker(mm, splits)
    if blocker:
        return "reducer", blocker
    extents, other = output_extents(mm.tile)
    return reduce_choice(extents["M"], extents["N"], other, splits, _tiles(mm, splits, target), target)


def _stream_k(mm: _Matmul, splits: int, target, forced: bool = False):
    """(ir.stream_k.StreamKPlan or None, why; "" for a balanced grid) for `splits` splits of the
    matmul: stream-K where
    its grid leaves the SMs unevenly loaded (issue 26's bar; `forced`: the knob asks for it
    anyway), the last block can add the partials itself, each SM's worker gets a ring's
    chunks (grid_plan.stream_k_plan) and the deal prices under the grid (stream_k_price;
    not `forced`)."""
    blocker = _in_kernel_blocker(mm, splits)
    if blocker:
        return None, f"no stream-K: {blocker}"
    tiles, sms = _tiles(mm, splits, target), sm_count(target)
    if not forced and balanced(tiles * splits, sms):
        return None, ""                      # nothing to deal: no word in the trace
    run, _, _ = _split_run(mm, splits)
    extents, other = output_extents(mm.tile)
    planned, _ = _decision(mm, target)
    tile, resident = block_geometry(extents["M"], extents["N"], target,
                                    planned if planned is not None and planned.splits == splits else None)
    plan = stream_k_plan(tiles, splits * run, sms, tiles * splits, resident)
    if plan is None:
        return None, (f"no stream-K: {tiles} tile{'s' if tiles > 1 else ''} x {splits * run} K chunks are under "
                      f"{MIN_CHUNKS} an SM")
    kind = mma_kind(mm.kernel, target)
    half = mm.kernel.precision not in ("float32", "tf32")
    dealt, kept = stream_k_price(extents["M"], extents["N"], mm.chunks * mm.bk, other, 2 if half else WORD,
                                 {"off": ""}.get(kind, "tf32" if kind == "tf32" else "bf16"), tiles * splits,
                                 splits, plan, tile, resident, target)
    priced = f"{dealt / kept:.2f}x the grid of {tiles * splits} blocks by grid_plan.stream_k_price"
    if not forced and dealt >= kept:
        return None, f"no stream-K: it prices {priced} (its bytes or flushes, not the busiest SM, bound the grid)"
    return plan, f"{plan.text()} ({priced})"


def _default_reduce(kernel: TileKernel, target) -> str:
    mm = _Matmul(kernel)
    if mm.reason:
        return "reducer"
    splits = _default_splits(kernel, target)
    if _stream_k(mm, splits, target)[0] is not None:
        return "stream_k"
    return "reducer" if splits == 1 else _reduce_decision(mm, splits, target)[0]


def _searched_splits(kernel: TileKernel, target) -> tuple[int, ...]:
    """The split counts the tuner tries: FACTOR_SPLITS (9..11, for an SM count's odd factors)
    only where the plan took one, as the planners offer them only where nothing else balances
    (grid_plan.split_counts); elsewhere they spent the search's trials on grids the ranking
    had already priced out."""
    default = _default_splits(kernel, target)
    return tuple(s for s in SPLITS if s not in FACTOR_SPLITS or s == default)


def _searched_reduce(kernel: TileKernel, target) -> tuple[str, ...]:
    """Who adds the partials, as the tuner tries it: stream_k only where 003 deals the grid by
    default (tiles and splits leave it unbalanced and stream-K prices cheaper); elsewhere its
    trials would go to dealing grids already balanced, which the price ranks out, and crowd
    the search's budget."""
    default = _default_reduce(kernel, target)
    return ("in_kernel", "reducer") + (("stream_k",) if default == "stream_k" else ())


KNOBS = (Knob("splits", SPLITS, _default_splits, "blocks that share one output tile's K range (1: off)",
              searched=_searched_splits),
         Knob("reduce", ("in_kernel", "reducer", "stream_k"), _default_reduce,
              "who adds the partials: the last block of each tile (a counter), a reducer kernel, or "
              "stream-K's workers (the K chunks dealt evenly, the last segment of a tile adds)",
              searched=_searched_reduce))


def apply(kernel: TileKernel, pctx: PassContext):
    mm = _Matmul(kernel, pctx.types)
    if mm.reason:
        return Skip(mm.reason)
    S = pctx.knobs["splits"]
    planned, why = _decision(mm, pctx.target)
    asked = pctx.knobs.get("reduce", "reducer")
    # stream-K where the knob asks for it (by default: where it pays); else why an unevenly
    # loaded grid is not dealt ("" for a balanced one)
    dealt, dealt_why = _stream_k(mm, S, pctx.target, forced=asked == "stream_k")
    if asked != "stream_k" and dealt is not None:
        dealt, dealt_why = None, f"no stream-K: reduce={asked}, though it would deal the grid ({dealt_why})"
    if S == 1 and dealt is None:             # one split is dealt to workers, or no split at all
        if planned is not None and planned.splits == 1:
            return Skip(f"splits=1: {why}" + (f"; {dealt_why}" if dealt_why else ""))
        blocks = _thread_tiles(mm.tile, pctx.target.sm_count or 1)
        kept = f"; {why}" if planned is None and why else ""      # the default kept, and why (wgmma)
        kept += f"; {dealt_why}" if dealt_why else ""
        if blocks >= _grid_target(pctx.target):
            return Skip(f"splits=1: about {blocks:g} blocks of {FULL_BLOCK} threads already fill the grid{kept}")
        return Skip(f"splits=1: no split count in {SPLITS[1:]} divides {mm.chunks} K chunks of {mm.bk} into "
                    f"runs of at least {MIN_CHUNKS}{kept}")
    if mm.chunks < S * SHORT_CHUNKS:
        return Skip(f"{mm.chunks} K chunks do not make {S} splits of {SHORT_CHUNKS}")
    tile, outer = mm.tile, mm.outer
    base = outer.var[:-1] if outer.var.endswith("o") else outer.var
    ks = fresh_name(f"{base}s", used_vars(kernel.body))
    # overhanging splits (split_run) run past the chunks: through 002's K tail (which they
    # absorb, its loop dropped: one run reads it, in order) and then past K, as zeros
    C, over, no_overhang = _split_run(mm, S)
    body = substitute_body(outer.body, {outer.var: var(ks) * C + var(outer.var)}, {outer.var: C, ks: S})
    new_outer = Loop(outer.var, C, outer.kind, body, outer.role, outer.unroll)
    ws = fresh_name(f"{kernel.name}_partials", set(pctx.types))
    partial = Store(ws, (var(ks),) + tuple(mm.store.index), mm.acc)
    split = SplitK(S, ws, f"{kernel.name}_reduce", max(0, mm.chunks - S * C), overhang=over)
    notes = (why,) if why and (planned is None or planned.splits == S) else ()
    if no_overhang:
        notes += (f"no overhang: {no_overhang}; {split.leftover} leftover K chunks to the reducer",)
    reduce, reason = _reduce_decision(mm, S, pctx.target)
    tail: tuple = ()
    if dealt is None and dealt_why:
        notes += (dealt_why,)
    if asked in ("in_kernel", "stream_k") and not _in_kernel_blocker(mm, S):
        counter = fresh_name(f"{kernel.name}_arrivals", set(pctx.types) | {ws})
        split = dataclasses.replace(split, reduce="in_kernel", counter=counter, reducer="")
        if dealt is not None:
            split = dataclasses.replace(split, reduce="stream_k", workers=dealt.workers, tiles=dealt.tiles,
                                        slots=dealt.slots)
            reason = dealt_why
        tail = (SplitArrive(counter, ks, S),) + tuple(_sum_partials(mm, split, used_vars(kernel.body) | {mm.acc}))
        tail += tuple(_rename(st, mm.acc, tail[-1].dst if len(tail) > 1 else mm.acc) for st in mm.epilogue)
        notes += (reason if reduce == asked or dealt is not None else f"in the kernel by the knob ({reason})",)
    elif S > 1:
        notes += (reason if reduce == "reducer" else f"a reducer kernel ({reason.split(': ', 1)[-1]})",)
    new_tile = Tile(tile.axes + (TileAxis(ks, S, BLOCK, "K"),), tuple(mm.prologue) + (new_outer, partial) + tail)
    outputs = (ws,) + ((mm.store.tensor,) if tail else ())
    out = dataclasses.replace(replace_tile(kernel, new_tile), outputs=outputs, split_k=split)
    return Noted(out, notes) if notes else out


def _sum_partials(mm: _Matmul, split: SplitK, taken: set) -> list:
    """Loads of the `split.splits` partials at the output's index, added in split order (one
    fixed order of float adds, whoever adds them); the last statement holds the sum."""
    index = tuple(mm.store.index)
    dtype = next((a.dtype for a, _ in walk(mm.outer.body) if isinstance(a, Accumulate) and a.acc == mm.acc),
                 "float32")       # an integer matmul's partials add up as integers
    body, total = [], None
    for s in range(split.splits):
        part = fresh_name(f"{mm.acc}_p{s}", taken)
        taken.add(part)
        body.append(Load(part, split.workspace, (const(s),) + index))
        if total is not None:
            summed = fresh_name(f"{mm.acc}_s{s}", taken)
            taken.add(summed)
            body.append(Compute(summed, "add", (total, part), dtype=dtype))
            part = summed
        total = part
    return body


def reducer(before: TileKernel, split: SplitK) -> TileKernel:
    """The kernel that adds `before`'s split partial sums in split order (and its K tail)
    and applies its epilogue: one thread per output element, scheduled by the later passes."""
    mm = _Matmul(before)
    taken = used_vars(before.body) | {mm.acc}
    # the K % BK tail first (a K loop: later passes treat what follows as its epilogue), then
    # the partials in split order, then the tail's sum: one fixed order of float adds
    body = list(mm.prologue) + _tail(mm, split)
    summed = _sum_partials(mm, split, taken)
    body += summed
    total = summed[-1].dst
    taken |= {st.dst for st in summed}
    dtype = next((a.dtype for a, _ in walk(before.body) if isinstance(a, Accumulate) and a.acc == mm.acc),
                 "float32")
    if (mm.tail and not split.overhang) or split.leftover:
        summed = fresh_name(f"{mm.acc}_sum", taken)
        body.append(Compute(summed, "add", (total, mm.acc), dtype=dtype))
        total = summed
    body += [_rename(s, mm.acc, total) for s in mm.epilogue]
    tile = Tile(mm.tile.axes, tuple(body))
    return TileKernel(split.reducer, before.outputs, tuple(tile if isinstance(s, Tile) else s for s in before.body),
                      before.knobs, reduces_for=before.name)


def _tail(mm: _Matmul, split: SplitK) -> list:
    """The reducer's K loops: one over the `split.leftover` chunks past the splits' runs,
    then 002's K % BK tail as it is. The chunk body's index was simplified under 002's ranges
    (K-inner below BK, K-outer below the chunk count: a K built from reshaped axes reads
    (ko * BK + ki) // 32 as ko // 2), so the run's variable enters as chunk tv // BK and
    lane tv % BK, never as a K-inner longer than BK."""
    if split.overhang:          # the overhanging run read the K tail
        return []
    if not split.leftover:
        return list(mm.tail)
    inner = next(c for c in mm.outer.body if isinstance(c, Loop) and c.role == "K")
    start = mm.chunks - split.leftover
    taken = used_vars(mm.tile.body)
    tv = fresh_name(mm.outer.var[:-1] + ("r" if mm.tail else "t"), taken)
    extent = split.leftover * mm.bk
    chunk = {mm.outer.var: const(start) + floordiv(var(tv), mm.bk, {tv: extent}),
             inner.var: mod(var(tv), mm.bk, {tv: extent})}
    body = substitute_body(inner.body, chunk, {tv: extent})
    return [Loop(tv, extent, "reduce", body, "K")] + list(mm.tail)


def workspace_buffer(split: SplitK, out: TensorType) -> Buffer:
    """The temporary the split kernel stores its partial sums into: splits x the output, in the
    accumulator's type (float32 for a half output: partial sums are never rounded to half)."""
    return Buffer(split.workspace, TensorType((split.partials,) + tuple(out.shape), value_dtype(out.dtype)), "temp")


def counter_buffer(split: SplitK, out: TensorType) -> Buffer:
    """An in-kernel reduction's arrival counters: one int32 per output tile (as many as the
    output's elements at most), zero before the first launch (a `counter` buffer: allocated
    zeroed, never shared) and reset by each tile's last block, so every launch, a CUDA
    graph's replays included, starts from zeros."""
    return Buffer(split.counter, TensorType((out.numel,), "int32"), "counter")


def _rename(s, old: str, new: str):
    """An epilogue statement reading the sum `new` where it read the accumulator `old`."""
    if isinstance(s, Compute):
        return dataclasses.replace(s, args=tuple(new if a == old else a for a in s.args))
    if isinstance(s, Store) and s.value == old:
        return dataclasses.replace(s, value=new)
    return s


class SplitKPass(KernelPass):
    """003 as a KernelPass whose program step also adds each split kernel's reducer (right
    after it) and its workspace (a temporary): the tuner's per-kernel `apply_to` rewrites
    only the split kernel, the pipeline's step the whole program."""

    def run(self, program, ctx):
        step = super().run(program, ctx)
        after = step.after
        before = {k.name: k for k in program.kernels}
        names = {k.name for k in after.kernels}
        types = {b.name: b.type for b in tuple(after.buffers) + tuple(after.written)}
        kernels, written = [], list(after.written)
        for k in after.kernels:
            split = k.split_k
            if split is None or k.name not in before or before[k.name].split_k is not None:
                kernels.append(k)
                continue
            out = types[_Matmul(before[k.name]).store.tensor]
            written.append(workspace_buffer(split, out))
            if split.in_kernel:
                kernels.append(k)
                written.append(counter_buffer(split, out))
                continue
            name = fresh_name(split.reducer, names - {split.reducer}) if split.reducer in names else split.reducer
            names.add(name)
            split = dataclasses.replace(split, reducer=name)
            kernels += [dataclasses.replace(k, split_k=split), reducer(before[k.name], split)]
        new = dataclasses.replace(after, kernels=tuple(kernels), written=tuple(written))
        return dataclasses.replace(step, after=new)


PASS = SplitKPass("003_split_matmul_k", "tile", DESCRIPTION, apply, KNOBS)
