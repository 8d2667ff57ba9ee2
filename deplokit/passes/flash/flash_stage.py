"""007 stage_inputs for flash attention: the key and value tiles into shared memory.

After 001 every thread reads its key tile's keys and values from global memory, each
element once per query row of the block. Here each becomes one Stage at the top of the
key-tile loop: the block copies the tile (Tk keys x head_dim) once, and every thread reads
the copy (all threads read the same key at the same time: a broadcast, no bank conflict;
16 bytes at a time where 001 split head_dim by 4, a4q * 4 + a4v, or a4q * 8 + a4l * 4 + a4v
where two lanes share a row: each lane's 4 adjacent floats, the lanes' runs side by side).

    for a3o in 0..4:  # serial
        k_smem = Stage(k, origin=(0, a0b, a3o * 16, 0), slab=(a3i:16@2, a4:128@3))
        v_smem = Stage(v, origin=(0, a0b, a3o * 16, 0), slab=(a3j:16@2, a5:128@3))
        ...
                in1 = load k_smem[a3i, a4]       (was: load k[0, a0b, a3o * 16 + a3i, a4])

A load is staged when, inside one of the key-tile loop's register loops over the keys of
the tile, it reads a box: the key in one dimension, one inner register loop's variable in
another, every other dimension fixed for the block. (A mask read per query row is not.)
A query row read there (head_dim too large for registers, FlashPlan.query_registers) is
staged once for the whole block, before the key-tile loop: a row per thread, padded. With two
rows a thread (FlashPlan.rows) the block's query rows are one box (heads x rows x head_dim,
_rows_stage), read by the head_dim-outer score loop whose key loop sits inside it.

How the tiles are copied is decided later, as for a matmul's K loop: 010 gives the key loop
(from tile 0, or causal from the diagonal tile) a ring, 011 makes its K and V stages
tensor-map copies on sm_90 (one box per operand per key tile: flash_tma_notes;
flash_tma_skip says why not), 013 cp.async otherwise.
"""
from __future__ import annotations

from ...ir.index import Affine, bounds, free_vars, stride_one, substitute, var
from ...ir.loop_ir import Load, Loop
from ...ir.tile_ir import BLOCK, THREAD, SlabAxis, Stage, StridedLoop, Tile, TileKernel, map_body, walk
from ..record import Skip, fresh_name, replace_tile
from ..stage_geometry import k_outer_loops, trips


def stage_key_tiles(kernel: TileKernel, types) -> TileKernel | Skip:
    tile = kernel.tile()
    outer = next((s for s in tile.body if isinstance(s, (Loop, StridedLoop)) and s.kind == "serial"), None)
    if outer is None:
        return Skip("flash attention: no key-tile loop")
    if any(isinstance(s, Stage) for s in outer.body):
        return Skip("already staged")
    uniform = {a.var for a in tile.axes if a.kind == BLOCK} | {outer.var}
    registers = {r.acc for r in kernel.register_tiles}
    taken = set(types) | {s.dst for s, _ in walk(tile.body) if isinstance(s, Load)}
    stages, renamed, rows, several = [], {}, [], []
    threads = [a for a in tile.axes if a.kind == THREAD]
    lanes = {threads[-1].var: threads[-1].extent} if kernel.flash.lanes > 1 else {}   # a row's threads
    # a register loop over the keys of the tile, or (FlashPlan.rows > 1) the head_dim-outer
    # score loop (reduce) with the keys' register loop inside
    for top in (s for s in outer.body if isinstance(s, Loop) and s.kind in ("register", "reduce")):
        for s, loops in walk(top.body):
            if not isinstance(s, Load) or s.tensor not in types or s.tensor in registers or s.pad is not None:
                continue
            around = (top,) + tuple(lp for lp in loops if isinstance(lp, Loop))
            slab, key_loop = None, None
            for key_loop in (lp for lp in around if lp.kind == "register"):
                slab = _slab(s, key_loop, [lp for lp in around if lp is not key_loop], uniform, lanes)
                if slab is not None:
                    break
            if slab is None:
                if kernel.flash.rows > 1:
                    several.append((s, around))
                    continue
                row = _row_stage(s, loops, threads, uniform - {outer.var}, taken)
                if row is not None:
                    rows.append(row[0])
                    taken.add(row[0].name)
                    renamed[id(s)] = row[1]
                continue
            name = fresh_name(f"{s.tensor}_smem", taken)
            taken.add(name)
            (kd, ki, tk), (idim, part, extent) = slab
            origin = tuple(substitute(e, {ki: Affine()}) if d == kd else (e - part if d == idim else e)
                           for d, e in enumerate(s.index))
            axis = next(lp.var for lp in around if lp.var in free_vars(part))
            stages.append(Stage(name, s.tensor, origin, (SlabAxis(ki, tk, kd), SlabAxis(axis, extent, idim))))
            renamed[id(s)] = Load(s.dst, name, (var(ki), part))
    # FlashPlan.rows > 1: one box of the block's query rows for every row's loads of a tensor
    for tensor in dict.fromkeys(s.tensor for s, _ in several):
        staged = _rows_stage([x for x in several if x[0].tensor == tensor], threads, uniform - {outer.var}, taken)
        if staged is not None:
            rows.append(staged[0])
            taken.add(staged[0].name)
            renamed.update(staged[1])
    if not stages:
        return Skip("flash attention: no key or value tile to stage")

    def swap(st):
        return renamed.get(id(st), st)

    new_outer = outer.__class__(**{**outer.__dict__, "body": tuple(stages) + map_body(outer.body, swap)})
    body = tuple(rows) + tuple(new_outer if st is outer else st for st in tile.body)
    return replace_tile(kernel, Tile(tile.axes, body))


def _row_stage(load: Load, loops, threads, uniform, taken):
    """(Stage, the load from it) for the block's query rows: each thread reads its own row
    (the THREAD axes, each in its own dimension) along an inner loop; a float of padding
    per row keeps the threads' reads on distinct banks. None when the load is not that."""
    used = set().union(*(free_vars(e) for e in load.index))
    inner = [lp for lp in loops if isinstance(lp, Loop) and lp.var in used]
    axes = [a for a in threads if a.var in used]
    if len(inner) != 1 or not axes or used - uniform - {a.var for a in axes} - {inner[0].var}:
        return None
    slab, at = [], []
    for name, extent in [(a.var, a.extent) for a in axes] + [(inner[0].var, inner[0].extent)]:
        found = [d for d, e in enumerate(load.index) if name in free_vars(e)]
        if len(found) != 1 or not stride_one(load.index[found[0]], name):
            return None
        slab.append(SlabAxis(name, extent, found[0]))
        at.append(var(name))
    if len({ax.dim for ax in slab}) != len(slab) or [ax.dim for ax in slab] != sorted(ax.dim for ax in slab):
        return None
    name = fresh_name(f"{load.tensor}_smem", taken)
    origin = tuple(substitute(e, {ax.var: Affine() for ax in slab}) for e in load.index)
    return Stage(name, load.tensor, origin, tuple(slab), pad=1), Load(load.dst, name, tuple(at))


# floats after each staged query row (FlashPlan.rows > 1): a row stays 16-byte aligned for its
# LDS.128 and rows two apart (one thread's pair, the next thread's) start 64 bytes apart in the banks
ROWS_PAD = 8


def _rows_stage(loads, threads, uniform, taken):
    """(Stage, {id(load): the load from it}) for the block's query rows read by threads that own
    several rows each (FlashPlan.rows): one box over every dimension the threads and the loops
    around the loads index (the rows' constants included), at the block's origin, padded by
    ROWS_PAD; None when the loads are not reads of one such box."""
    parts, origin, spans = [], None, {}
    for load, around in loads:
        ranges = {a.var: a.extent for a in threads} | {lp.var: lp.extent for lp in around}
        used = set().union(*(free_vars(e) for e in load.index))
        if not used & {a.var for a in threads} or used - uniform - set(ranges):
            return None
        at, base = [], []
        for dim, e in enumerate(load.index):
            part = Affine(tuple((a, c) for a, c in e.terms if free_vars(Affine(((a, 1),))) & set(ranges)),
                          e.const if free_vars(e) & set(ranges) else 0)
            base.append(e - part)
            if part.terms:
                span = bounds(part, ranges)
                if span is None or span[0] < 0:
                    return None
                low, high = spans.get(dim, span)
                spans[dim] = (min(low, span[0]), max(high, span[1]))
            at.append(part)
        if origin not in (None, base) or any(free_vars(o) - uniform for o in base):
            return None
        origin = base
        parts.append((load, at))
    dims = sorted(spans)
    if any(spans[d][0] != 0 for d in dims) or dims[-1] != len(origin) - 1 or (spans[dims[-1]][1] + 1) % 4:
        return None
    name = fresh_name(f"{loads[0][0].tensor}_smem", taken)
    slab = tuple(SlabAxis(f"{name}_{d}", spans[d][1] + 1, d) for d in dims)
    stage = Stage(name, loads[0][0].tensor, tuple(origin), slab, pad=ROWS_PAD)
    return stage, {id(load): Load(load.dst, name, tuple(at[d] for d in dims)) for load, at in parts}


def _slab(load: Load, key_loop: Loop, loops, uniform, lanes):
    """((key dim, key var, Tk), (inner dim, the slab-relative index there, extent)) of a box
    read, else None. The inner dimension may also hold lane variables (THREAD axes a row is
    dealt to: a4 * 2 + a4l)."""
    used = set().union(*(free_vars(e) for e in load.index))
    # the loop along the inner dimension, or loops splitting it (the score's d = dq * 4 + dv)
    inner = {lp.var: lp.extent for lp in loops if isinstance(lp, Loop) and lp.var in used and lp is not key_loop}
    if not inner or used - uniform - {key_loop.var} - set(inner) - set(lanes):
        return None
    kd = [d for d, e in enumerate(load.index) if key_loop.var in free_vars(e)]
    idim = [d for d, e in enumerate(load.index) if free_vars(e) & set(inner)]
    if len(kd) != 1 or len(idim) != 1 or kd == idim or not stride_one(load.index[kd[0]], key_loop.var):
        return None
    if any(free_vars(e) - uniform - set(inner) - set(lanes) for d, e in enumerate(load.index) if d != kd[0]):
        return None
    e = load.index[idim[0]]
    # the slab-relative part: every term of loop and lane variables, a quad's (c // 4, c % 4) too
    part = Affine(tuple((a, c) for a, c in e.terms if not free_vars(Affine(((a, 1),))) & uniform))
    if free_vars(e - part) & (used - uniform):
        return None
    span = bounds(part, {**inner, **lanes})
    if span is None or span[0] != 0:
        return None
    return (kd[0], key_loop.var, key_loop.extent), (idim[0], part, span[1] + 1)


def key_loop_skip(kernel) -> str:
    """Why 010 / 015 find no key-tile loop to give a ring in a flash kernel ('' for any
    other kernel): a key loop from tile 0 and a causal one from the block's diagonal tile
    (a StridedLoop of step 1 whose start is an index of the block) both have one."""
    if getattr(kernel, "flash", None) is None:
        return ""
    if any(isinstance(s, StridedLoop) and s.kind == "serial" for s in kernel.tile().body):
        return ("flash attention: the key loop's start is not an index of the block, or its step is not 1: "
                "its K/V tiles keep one buffer")
    if any(isinstance(s, Loop) and s.kind == "serial" and s.stop is not None for s in kernel.tile().body):
        return ("flash attention: the key-tile loop stops at a runtime bound (the position): its K/V tiles "
                "keep one buffer (a ring would copy tiles past the bound)")
    return "flash attention: no key-tile loop"


def flash_tma_skip(kernel) -> str:
    """Why 011 finds no K/V tile of a flash kernel to copy by tensor map ('' for any other
    kernel): 011 copies them so only in a ring (010's buffers), as it does a matmul's."""
    if getattr(kernel, "flash", None) is None:
        return ""
    tile = kernel.tile()
    outer = next(iter(k_outer_loops(tile, True)), None)     # from tile 0, or causal from the diagonal
    if outer is None:
        why = key_loop_skip(kernel)
    elif trips(tile, outer) == 1:
        why = "flash attention: every key fits one tile (the key-tile loop runs once): no ring to fill"
    else:
        why = "flash attention: 010 left the K/V tiles in one buffer"
    return why + "; a tensor-map copy needs a ring of K/V buffers (cp.async instead)"


def flash_tma_notes(kernel, boxes) -> tuple[str, ...]:
    """011's note on a flash kernel's K/V tiles it copies by tensor map (boxes: stage name ->
    TmaBox). One elected thread issues one copy per operand per key tile, where cp.async has
    every thread issue its share (Tk x head_dim / threads 16-byte copies, their addresses
    and the commit/wait); the key tile's compute (Tk keys x head_dim per query row) hides
    the producer's ~50 issue slots many times over, so the default is TMA at any size."""
    if getattr(kernel, "flash", None) is None or not boxes:
        return ()
    names = ", ".join(f"{name} ({box.text()})" for name, box in boxes.items())
    return (f"flash attention: {names}: one tensor-map copy per operand per key tile, issued by one thread "
            f"into the ring's full mbarrier (keys past T read zeros, which the score masks)",)
