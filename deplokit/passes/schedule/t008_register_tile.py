"""008 register_tile: each thread computes a TM x TN register block of a matmul.

After blockify a matmul's thread owns one output (m, n) = (b0*16 + t0, b1*16 + t1): for every
k it reads one A and one B element from shared memory and does one multiply-add, so shared
memory, not arithmetic, bounds it. With a register block the thread owns TM x TN outputs and
for every k reads TM A values and TN B values for TM*TN multiply-adds; the block's tile grows
to 16*TM x 16*TN and the grid shrinks by TM*TN.

    before (64 x 256 x 128, after 007)
    Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):4=BLOCK, a1b(N):16=BLOCK)):
        for a2o in 0..8:  # reduce (K)
            a_smem = Stage(a, origin=(a0b * 16, a2o * 16), slab=(a0t:16@0, a2i:16@1))
            b_smem = Stage(b, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1t:16@1))
            for a2i in 0..16:  # reduce (K)
                in0 = load a_smem[a0t, a2i]
                in1 = load b_smem[a2i, a1t]
                v0 = multiply(in0, in1)
                acc0 <- add(acc0, v0)
        matmul[a0b * 16 + a0t, a1b * 16 + a1t] = acc0

    after (tm=2, tn=4, layout=strided): the register-tile example in deplokit/ir/tile_ir.py's
    docstring (the block tile is 32 x 64, a0b and a1b shrink to 2 and 4 blocks, the loads and
    the accumulator run inside `register` loops a0r, a1r).

Extents. The defaults (default_extents) take each axis's largest extent up to 8 whose block
tile the axis fills, then halve the larger while twice the blocks would still fit one per SM
(a thread keeping at least 16 outputs): 4096^2 gets 8 x 8 (128 x 128 blocks), M = 128
projections 4 x 4 or 8 x 4, M = 32 2 x 8 (003 splits K to fill the grid). Any extent is
halved while it exceeds the axis's block count (a block tile past the whole axis would be
padding) or while the grown Stage slabs would not fit in static shared memory (the larger
extent first).

Layout. `strided` (the article's) puts slot r of thread t at origin + r*16 + t: for every
slot a warp's 16 N-threads read 16 consecutive floats of the B tile (conflict-free, but one
scalar LDS per slot) and store 16 consecutive floats of the output (coalesced), and its two
M-rows of the A tile are 16 floats apart (different banks). `contiguous` puts it at
origin + t*TN + r (a thread's outputs are adjacent). `quads` (the default) keeps M strided
(A is read along k, where nvcc merges 4 steps of the unrolled k loop into one LDS.128) and
puts N slot r at origin + t*4 + (r // 4)*64 + r % 4: each lane's 4 slots of a quad are one
aligned float4, and the 8 lanes of a quarter warp read 128 consecutive bytes, so B's
fragment is TN/4 conflict-free LDS.128 per k (banks.py prices it so; 009 leaves it alone).

The rewrite is one substitution, t -> r*16 + t and b -> TR*b (b*16 + t becomes
b*16*TR + r*16 + t), applied to every index and Stage origin, after which each Stage slab
over t covers 16*TR elements; then every run of statements is wrapped in register loops,
each statement as shallow as its indices and operands allow (A loads outside the N loop).
Accumulators become register arrays indexed by the slots; the epilogue reads them back with
`load acc0[a0r, a1r]`. Indices past M or N (partial tiles) are guarded by the materialiser
as before: the index bounds grow with the block tile.
"""
from __future__ import annotations

import dataclasses
import math

from ...analysis.occupancy import balanced, sm_balance
from ...ir.fragments import SHAPES, WARPGROUP
from ...ir.index import free_vars, var
from ...ir.loop_ir import Accumulate, Load, Loop, Store
from ...ir.substitute import substitute_body
from ...ir.tile_ir import (
    BLOCK,
    THREAD,
    Combine,
    RegisterTile,
    SlabAxis,
    Stage,
    StridedLoop,
    Tile,
    TileKernel,
    WarpgroupMma,
    used_vars,
    walk,
)
from ..mma.mma_tile import HALF_PRECISIONS, MMA_SHAPE, mma_sync_tile, mma_tile
from ..record import KernelPass, Knob, Noted, PassContext, Skip, fresh_name, replace_tile
from ..stage_geometry import restamp_stages
from ..wgmma.wgmma_tile import tma_reason
from .block_shape import EXTENTS, default_extents
from .grid_plan import LDMATRIX_KINDS, WGMMA_NS_TRIED, decided, mma_kind, plan, split_geometry
from .register_nest import drop_dead, nest_body
from .slot_maps import slot_index, warp_lanes, warp_slot_map

DESCRIPTION = "replicate the inner tile so each thread owns a register block"
LAYOUTS = ("strided", "contiguous", "quads", "warps")
MMA = ("off", "tf32", "half", "wgmma")


def role_pair(tile: Tile, role: str):
    """(THREAD axis, BLOCK axis) that blockify split an output axis of `role` into, or None."""
    threads = [a for a in tile.axes if a.kind == THREAD and a.role == role]
    if len(threads) != 1 or not threads[0].var.endswith("t"):
        return None
    t = threads[0]
    for b in tile.axes:
        if b.kind == BLOCK and b.role == role and b.var == t.var[:-1] + "b":
            return t, b
    return None


def _role_size(kernel: TileKernel, role: str) -> tuple[int, int]:
    """(elements, threads) of the output axis of `role` (1, 16 when blockify did not split it)."""
    try:
        tile = kernel.tile()
    except ValueError:
        return 1, 16
    pair = role_pair(tile, role)
    if pair is None:
        return 1, 16
    t, b = pair
    return t.extent * b.extent, t.extent


def _default(kernel, target, axis: int) -> int:
    (m, t_m), (n, t_n) = _role_size(kernel, "M"), _role_size(kernel, "N")
    planned = _planned(kernel, target)
    if planned is not None:        # split-K (003): the block of the grid it was planned with
        return planned.regs[axis]
    return default_extents(m, n, target.sm_count or 1, (t_m, t_n))[axis]


def _planned(kernel, target):
    """grid_plan's choice for the kernel's split count and thread counts: 003's default grid
    when the kernel has its split count and thread shape, else (split-K) the plan at these
    knobs, else None."""
    try:
        tile = kernel.tile()
    except ValueError:
        return None
    threads = tuple(math.prod(a.extent for a in tile.axes if a.kind == THREAD and a.role == r) for r in "MN")
    grid = decided(kernel, target)
    if grid is not None and grid.threads == threads:
        return grid
    split = split_geometry(kernel)
    if split is None:
        return None
    return plan(split.m, split.n, split.chunks, split.bk, target, split.other, splits=split.splits, threads=threads,
                fed=mma_kind(kernel, target) in LDMATRIX_KINDS)


KNOBS = (
    Knob("tm", EXTENTS, lambda k, t: _default(k, t, 0), "register-block rows (M) per thread"),
    Knob("tn", EXTENTS, lambda k, t: _default(k, t, 1), "register-block columns (N) per thread"),
    Knob("layout", LAYOUTS, lambda k, t: "quads",
         "which outputs a thread's slots are: r*16 + t, t*TR + r, N in quads of 4 adjacent columns, "
         "or quads inside each warp's own sub-tile"),
    Knob("mma", MMA, lambda k, t: _mma_default(k, t),
         "tensor cores: off (FP32 FMA), mma.sync on tf32 inputs (m16n8k8; a precision='tf32' program's "
         "default) or on the operands' half type (m16n8k16 bf16/f16; a half matmul's default on sm_80+), "
         "or Hopper's wgmma.mma_async on half operands TMA leaves in shared memory (a half matmul's "
         "default on sm_90; mma.sync where it does not fit); FP32 accumulate",
         searched=lambda k, t: _mma_searched(_mma_default(k, t))),
    Knob("wgmma_n", (0,) + WGMMA_NS_TRIED, lambda k, t: 0,
         "wgmma's N tile (columns a warpgroup's block computes): 0 takes the grid plan's where it chose one, "
         "else the widest that keeps the SMs evenly loaded; a width that does not fit takes that rule",
         searched=lambda k, t: (0, 256, 128, 64) if _mma_default(k, t) == "wgmma" else (0,)),
)


def _mma_default(kernel, target) -> str:
    return mma_kind(kernel, target)


def _mma_searched(default: str) -> tuple:
    """The tuner's values: off against the default (wgmma's against mma.sync too)."""
    return {"off": ("off",), "wgmma": ("off", "half", "wgmma")}.get(default, ("off", default))


def _k_loops(tile: Tile):
    return [s for s, _ in walk(tile.body) if isinstance(s, Loop) and s.role == "K"]


def apply(kernel: TileKernel, pctx: PassContext):
    tile = kernel.tile()
    if not _k_loops(tile):
        return Skip("not a matmul: no K reduce loop")
    if any(isinstance(s, Loop) and s.kind == "register" for s, _ in walk(tile.body)):
        return Skip("already register-tiled")
    if any(isinstance(s, (StridedLoop, Combine)) for s, _ in walk(tile.body)):
        return Skip("threads share a reduction: no output block to replicate")
    layout, note = pctx.knobs["layout"], ""
    if layout == "warps":
        note = _warps_reason(tile)
        layout = "quads" if note else layout
    plan, reasons, kept_whole = [], [], []
    for role, want in (("M", pctx.knobs["tm"]), ("N", pctx.knobs["tn"])):
        if want == 1:
            continue
        pair = role_pair(tile, role)
        if pair is None:
            axes = [str(a) for a in tile.axes if a.role == role]
            reasons.append(f"{role} ({', '.join(axes) or 'none'}) fits in one block: no BLOCK axis to shrink")
            continue
        t, b = pair
        split = rows_split_over_dims(tile, t.var, b.var)
        if split:
            kept_whole.append(f"{role}'s thread and block indices run along different dimensions of {split} "
                           f"(rows merged from two axes by a reshape): a register block along {role} would "
                           f"run its rows past the inner axis")
            reasons.append(kept_whole[-1])
            continue
        while want > 1 and want > b.extent:    # no larger than the axis: the extra rows would all be padding
            want //= 2
        if want > 1:
            plan.append((role, t, b, want))
    if not plan:
        if reasons:
            return Skip("; ".join(reasons))
        return Skip(f"tm={pctx.knobs['tm']}, tn={pctx.knobs['tn']}: one output per thread")
    notes = [f"warps layout not used ({note}): quads"] if note else []
    notes += kept_whole
    if pctx.knobs["mma"] != "off":
        out = _tensor_cores(kernel, plan, pctx)
        if not isinstance(out, Skip):
            return out
        notes.append(f"{out.reason}: FP32 FMA register tile")
    while True:                                # the grown slabs must fit in shared memory
        out = _register_tile(kernel, plan, layout)
        need = _smem_bytes(out)
        if need <= pctx.target.static_smem_per_block:
            out = restamp_stages(out, pctx.types)      # grown slabs, new origins: copy units restamped
            return Noted(out, tuple(notes)) if notes else out
        big = max(range(len(plan)), key=lambda i: plan[i][3])
        role, t, b, n = plan[big]
        plan[big] = (role, t, b, n // 2)
        if all(p[3] == 1 for p in plan):
            return Skip(f"the slabs of a register block need {need} bytes of shared memory, "
                        f"more than {pctx.target.static_smem_per_block}")



def rows_split_over_dims(tile: Tile, t: str, b: str) -> str:
    """The tensor an access of which indexes one dimension by the thread variable `t` of an
    axis and another by its block variable `b` ('' if none). 005 writes a row m = b*T + t of
    x.reshape(B*T, K) as x[b, t, k]; the register block's substitution (t -> r*T + t,
    b -> b*n) is exact only where both sit in one dimension (x[b*T + t, k])."""
    stages = {s.name for s, _ in walk(tile.body) if isinstance(s, Stage)}

    def split(dims) -> bool:       # dims: the variables of each dimension's index
        return any({t, b} & d and {t, b} & d != {t, b} for d in dims)

    for s, _ in walk(tile.body):
        if isinstance(s, Stage):
            dims = [free_vars(o) | {ax.var for ax in s.slab if ax.dim == d} for d, o in enumerate(s.origin)]
        elif isinstance(s, (Load, Store)) and s.tensor not in stages:
            dims = [free_vars(e) for e in s.index]
        else:
            continue
        if split(dims):
            return s.tensor
    return ""


def _tensor_cores(kernel: TileKernel, plan, pctx: PassContext):
    """The wgmma or mma.sync path (mma_tile.py); Skip with why not (the FMA tile is used), or
    mma.sync Noted with why not wgmma."""
    kind = pctx.knobs["mma"]
    if kind != "wgmma":
        return _mma_sync(kernel, plan, pctx, kind)
    out = _wgmma(kernel, pctx)
    if not isinstance(out, Skip):
        return out
    half = _mma_sync(kernel, plan, pctx, "half")
    if isinstance(half, Skip):
        return Skip(f"{out.reason}; {half.reason}")
    return Noted(half, (f"{out.reason}: mma.sync m16n8k16 instead",))


def _wgmma(kernel: TileKernel, pctx: PassContext):
    """Warpgroups of 64 x N on wgmma.mma_async (passes/wgmma/wgmma_tile.py), operands staged
    by TMA: the widest N tile whose slabs a tensor map copies and a descriptor reads."""
    if pctx.target.sm != 90:
        return Skip(f"wgmma exists on sm_90 (sm_90a) only, not {pctx.target.name}")
    precision = getattr(kernel, "precision", None)
    if precision not in HALF_PRECISIONS:
        return Skip(f"wgmma: needs a matmul of bf16 or fp16 operands (its operands are {precision})")
    tile = kernel.tile()
    pairs = {role: role_pair(tile, role) for role in ("M", "N")}
    if None in pairs.values():
        return Skip("wgmma: the output is not split into M and N blocks")
    if not any(isinstance(c, Loop) and c.role == "K" for lp in _k_loops(tile) for c in lp.body):
        return Skip("wgmma: K is one chunk (002): no K-outer loop to stage a TMA ring in")
    off = _staging_off(kernel, pctx)
    if off:
        return Skip(f"wgmma: its operands are TMA boxes in their rows' swizzle, and the config sets {off}=False")
    (tm, _), (tn, bn) = pairs["M"], pairs["N"]
    if [a for a in tile.axes if a.kind == THREAD] != [tm, tn]:
        return Skip("wgmma: the block's threads are not one M and one N axis (a batch shares the block)")
    threads = tm.extent * tn.extent
    block_m = 64 * (threads // WARPGROUP)
    if threads % WARPGROUP or block_m % tm.extent:
        return Skip(f"wgmma: {tm.extent} x {tn.extent} threads are not whole warpgroups of {WARPGROUP} "
                    f"whose 64-row tiles the M threads divide")
    reasons, fits = [], []
    for block_n in WGMMA_NS_TRIED:
        if block_n % tn.extent or (block_n > 8 and block_n >= 2 * tn.extent * bn.extent):
            continue                               # more than half the N tile would be padding
        regs = {"M": block_m // tm.extent, "N": block_n // tn.extent}
        out = mma_tile(kernel, pairs, regs, SHAPES[MMA_SHAPE[precision]], pctx.types, wgmma=True)
        if not isinstance(out, Skip):
            body = out.tile().body
            reads = {n for s, _ in walk(body) if isinstance(s, WarpgroupMma) for n in (s.a, s.b)}
            for st in {s.name: s for s, _ in walk(body) if isinstance(s, Stage) and s.name in reads}.values():
                t = pctx.types[st.tensor]
                why = tma_reason(st, t.shape, t.dtype)
                if why:
                    out = Skip(f"wgmma: {st.name} is no box a tensor map copies ({why})")
                    break
        if isinstance(out, Skip):
            reasons.append(out.reason)
            continue
        fits.append((block_n, out))
    if not fits:
        return Skip("; ".join(dict.fromkeys(reasons)) or "wgmma: no N tile fits")
    return _balanced_n(fits, pctx, kernel)


def _balanced_n(fits, pctx: PassContext, before):
    """The knob's wgmma N tile (`wgmma_n`) where it fits; else the grid plan's where it chose
    one (GridPlan.n_tile: where no grid balances, the cheapest, grid_plan.wgmma_cheapest); else
    the widest whose grid keeps the SMs evenly loaded (issue 26: a wider tile than 003's grid
    plan divides the blocks it planned to fill the SMs with: 64 x 64 tiles in 4 splits, 256
    blocks, became 64 of 64 x 256), else the widest; the trace says what it gave up."""
    sms = pctx.target.sm_count or 0

    def blocks(k) -> int:
        return math.prod(a.extent for a in k.tile().axes if a.kind == BLOCK)

    widest_n, widest = fits[0]
    planned = decided(before, pctx.target)
    asked = pctx.knobs.get("wgmma_n", 0)
    wanted = asked or (planned.n_tile if planned is not None else 0)
    taken = [(n, k) for n, k in fits if n == wanted]
    chosen_n, chosen = taken[0] if taken else \
        next(((n, k) for n, k in fits if not sms or balanced(blocks(k), sms)), fits[0])
    chosen = restamp_stages(chosen, pctx.types)
    b, w = blocks(chosen), blocks(widest)
    notes = []
    if asked and not taken:
        notes.append(f"wgmma N tile {asked} does not fit ({', '.join(str(n) for n, _ in fits)} do): {chosen_n}")
    if taken:
        whose = "the knob's" if asked else "the grid plan's (003's trace says why)"
        notes.append(f"wgmma N tile {chosen_n}, {whose}: {b} blocks on {sms} SMs, SM balance "
                     f"{sm_balance(b, sms):.2f}")
    elif chosen_n != widest_n:
        notes.append(f"wgmma N tile {chosen_n}: {b} blocks on {sms} SMs, SM balance "
                     f"{sm_balance(b, sms):.2f} (N {widest_n}: {w} blocks, {sm_balance(w, sms):.2f})")
    elif planned is not None and planned.blocks != b and sms:
        # 003 planned a grid of register-block tiles; a warpgroup's tile is 64 rows by N
        notes.append(f"wgmma tiles of 64 rows x N {chosen_n}: {b} blocks on {sms} SMs, SM balance "
                     f"{sm_balance(b, sms):.2f}, not the {planned.blocks} of 003's plan")
    used = (("wgmma_n", chosen_n),) if asked and not taken else ()
    return Noted(chosen, tuple(notes), used) if notes else chosen


# the later passes that must stage wgmma's operands: TMA boxes (011), in their rows' swizzle (012)
WGMMA_STAGING = ("011_tma_copy.enable", "012_swizzle_smem.enable")


def _staging_off(kernel, pctx: PassContext) -> str:
    """The first config key that switches off the staging wgmma reads (for this kernel or all)."""
    config = pctx.compile.config if pctx.compile is not None else {}
    for knob in WGMMA_STAGING:
        for key in (f"{kernel.name}:{knob}", knob):
            if config.get(key) is False:
                return key
    return ""


def _mma_sync(kernel: TileKernel, plan, pctx: PassContext, kind: str):
    """The mma.sync path on `kind` (tf32 | half) inputs (mma_tile.py), where its slabs fit."""
    tile = kernel.tile()
    pairs = {role: role_pair(tile, role) for role in ("M", "N")}
    regs = {role: 1 for role in ("M", "N")} | {role: n for role, _, _, n in plan}
    out = mma_sync_tile(kernel, pairs, regs, kind, pctx.target, pctx.types)
    if isinstance(out, Skip):
        return out
    need = _smem_bytes(out)
    if need > pctx.target.static_smem_per_block:
        return Skip(f"mma: the slabs of a {regs['M']} x {regs['N']} register block need {need} bytes of shared memory")
    return restamp_stages(out, pctx.types)


def _warps_reason(tile: Tile) -> str:
    """'' when the block's threads split into whole warps of 4 x 8 (or 8 x 4) lanes over
    the M x N threads, else why not."""
    pairs = [role_pair(tile, role) for role in ("M", "N")]
    threads = [a for a in tile.axes if a.kind == THREAD]
    if None in pairs or threads != [pairs[0][0], pairs[1][0]]:
        return "the block's threads are not one M and one N axis, both split into blocks"
    t_m, t_n = pairs[0][0].extent, pairs[1][0].extent
    if warp_lanes(t_m, t_n) is None:
        return f"{t_m} x {t_n} threads are not whole warps of 4 x 8 or 8 x 4 lanes"
    return ""


def _k_major(tile: Tile, t_var: str) -> bool:
    """Whether a stage holds the slab along `t_var` innermost (007 stored A k-major): its
    slots then read 4 adjacent floats, one LDS.128, when they are quads."""
    return any(isinstance(s, Stage) and len(s.slab) > 1 and s.slab[-1].var == t_var
               for s, _ in walk(tile.body))


def _smem_bytes(kernel: TileKernel) -> int:
    seen, total = set(), 0
    for s, _ in walk(kernel.tile().body):
        if isinstance(s, Stage) and s.name not in seen:
            seen.add(s.name)
            n = s.slab[-1].extent + s.pad
            for ax in s.slab[:-1]:
                n *= ax.extent
            total += s.element_bytes * n * s.buffers
    return total


def _register_tile(kernel: TileKernel, plan, layout) -> TileKernel:
    tile = kernel.tile()
    plan = [p for p in plan if p[3] > 1]
    used = used_vars(kernel.body)
    mapping, ranges, regs, slab_of = {}, {}, [], {}
    slots = {}
    for role, t, b, n in plan:
        r = fresh_name(t.var[:-1] + "r", used)
        used.add(r)
        nb = -(-b.extent // n)
        mapping[t.var] = slot_index(layout, role, var(t.var), t.extent, var(r), n, ranges | {r: n},
                                    m_quads=_k_major(tile, t.var))
        mapping[b.var] = var(b.var) * n
        ranges.update({t.var: t.extent, r: n, b.var: nb})
        regs.append(Loop(r, n, "register", (), role, True))
        slab_of[t.var] = (t.var[:-1], t.extent * n)
        slots[role] = (r, n)
    if layout == "warps":
        (tm, _), (tn, _) = role_pair(tile, "M"), role_pair(tile, "N")
        ranges.update({tm.var: tm.extent, tn.var: tn.extent})
        mapping.update(warp_slot_map((tm.var, tm.extent) + slots.get("M", (None, 1)),
                                     (tn.var, tn.extent) + slots.get("N", (None, 1)), ranges))
    body = substitute_body(tile.body, mapping, ranges)
    body = tuple(_resize_slab(s, slab_of) if isinstance(s, Stage) else s for s in body)
    body = _map_stages(body, slab_of)
    accs = sorted({s.acc for s, _ in walk(body) if isinstance(s, Accumulate)})
    recomputed: set[str] = set()
    body = drop_dead(nest_body(body, regs, accs, after_reduce=False, recomputed=recomputed), recomputed)
    axes = tuple(dataclasses.replace(a, extent=ranges[a.var]) if a.kind == BLOCK and a.var in ranges else a
                 for a in tile.axes)
    new_tile = Tile(axes, body)
    shape = tuple(lp.extent for lp in regs)          # each accumulator: one register per slot
    return dataclasses.replace(replace_tile(kernel, new_tile),
                               register_tiles=tuple(RegisterTile(a, shape) for a in accs))


def _resize_slab(stage: Stage, slab_of) -> Stage:
    """A slab axis over a tiled thread variable now covers the whole block tile: 16*TR
    elements, labelled with the output axis it runs along."""
    if not any(ax.var in slab_of for ax in stage.slab):
        return stage
    slab = tuple(SlabAxis(*slab_of[ax.var], ax.dim) if ax.var in slab_of else ax for ax in stage.slab)
    return dataclasses.replace(stage, slab=slab)


def _map_stages(body, slab_of):
    out = []
    for s in body:
        if isinstance(s, Stage):
            s = _resize_slab(s, slab_of)
        elif isinstance(s, Loop):
            s = dataclasses.replace(s, body=_map_stages(s.body, slab_of))
        elif isinstance(s, StridedLoop):
            s = dataclasses.replace(s, body=_map_stages(s.body, slab_of))
        out.append(s)
    return tuple(out)


PASS = KernelPass("008_register_tile", "tile", DESCRIPTION, apply, KNOBS)
