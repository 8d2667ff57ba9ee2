"""005 blockify_launch: pick the block's shape; split the free axes into BLOCK and THREAD.

A kernel whose threads cooperate on a row (it has a Combine) runs one row per block: every
other axis becomes BLOCK. Otherwise the innermost axes give their iterations to the block's
threads (consecutive threads read consecutive elements: coalesced), up to `block_threads`
(a matmul-like kernel: `thread_shape` threads along M x N, chosen from M, N and the SM
count by deplokit.passes.schedule.block_shape);
an axis split in two reads `a = ab * t + at`, and what the rounding adds beyond the axis's
extent is masked when the kernel is materialised. A split-K axis (003: a BLOCK axis of role
K) is already a grid axis: it stays, as the slowest BLOCK axis.

128-bit accesses (`vector_width` 4): each thread handles 4 consecutive elements of the
contiguous innermost axis, its body wrapped in a vector loop that the materialiser spells
as float4 loads and stores. A pointwise kernel splits that axis into a = ab * 4t + at * 4 + av;
a row kernel's phases step by 4 elements per lane (a = a3 * 4 + k * 4 lanes, then + av;
a reduce phase folds the 4 into its accumulator in order). Used only where every global
load and store of the loop allows it (unit stride, 16-byte aligned, last extent a multiple
of 4: deplokit.passes.vector_geometry); otherwise the accesses stay scalar and the trace
says why.

    Tile(axes=(a1t:256=THREAD, a0:4096=BLOCK, a1b:4=BLOCK)):
        for a1v in 0..4:  # vector
            in0 = load x0[a0, a1b * 1024 + a1t * 4 + a1v]
            ..."""
from __future__ import annotations

from ...ir.index import var
from ...ir.loop_ir import Loop
from ...ir.substitute import substitute_body
from ...ir.tile_ir import BLOCK, THREAD, Combine, StridedLoop, Tile, TileAxis, TileKernel, walk
from ..record import KernelPass, Knob, Noted, PassContext, Skip, replace_tile
from ..stage_geometry import VECTOR
from ..vector_geometry import body_reason, stamp_widths
from .block_shape import THREAD_SHAPES, default_thread_shape, parse_shape
from .grid_plan import LDMATRIX_KINDS, decided, mma_kind, plan, split_geometry
from .knobs import pow2_at_least

DESCRIPTION = "pick block extents; partition free axes into BLOCK and THREAD"


def _default_threads(kernel: TileKernel, target) -> int:
    grid = decided(kernel, target)
    if grid is not None:           # 003's grid counts one batch entry a block: none of the threads
        return grid.threads[0] * grid.threads[1]
    return 256


def _default_width(kernel: TileKernel, target) -> int:
    return VECTOR          # vectorise wherever the accesses allow it


def _role_sizes(kernel: TileKernel) -> dict[str, int]:
    """Output extent per role (M, N) of a matmul-like kernel before blockify."""
    try:
        tile = kernel.tile()
    except ValueError:
        return {}
    sizes: dict[str, int] = {}
    for a in tile.axes:
        if a.role in ("M", "N"):
            sizes[a.role] = sizes.get(a.role, 1) * a.extent
    return sizes


def _default_shape(kernel: TileKernel, target) -> str:
    sizes = _role_sizes(kernel)
    grid = decided(kernel, target)
    if grid is not None:           # 003's default grid (skinny plan or balance): its shape
        return grid.shape
    split = split_geometry(kernel)
    if split is not None:          # split-K (003): the shape of the grid it was planned with
        planned = plan(split.m, split.n, split.chunks, split.bk, target, split.other, splits=split.splits,
                       fed=mma_kind(kernel, target) in LDMATRIX_KINDS)
        if planned is not None:
            return planned.shape
    return default_thread_shape(sizes.get("M", 1), sizes.get("N", 1), target.sm_count or 1)



KNOBS = (Knob("block_threads", (64, 128, 256, 512, 1024), _default_threads,
              "threads per block when free axes are split (not a matmul's: thread_shape)"),
         Knob("vector_width", (1, VECTOR), _default_width,
              "consecutive innermost elements a thread moves with one float4 (where alignment allows)"),
         Knob("thread_shape", THREAD_SHAPES, _default_shape,
              "a matmul's threads along M x N (the block tile is this times 008's register block)"))


def _cooperative(tile: Tile) -> bool:
    return any(isinstance(s, Combine) for s, _ in walk(tile.body))


def apply(kernel: TileKernel, pctx: PassContext):
    tile = kernel.tile()
    splits = tuple(a for a in tile.axes if a.kind == BLOCK and a.role == "K")    # split-K (003)
    if any(a.kind == BLOCK and a not in splits for a in tile.axes):
        return Skip("already has BLOCK axes")
    if not tile.axes:
        return Skip("a single thread: nothing to split")
    if _cooperative(tile):
        lanes = [a for a in tile.axes if a.kind == THREAD and not a.role and _is_lane(tile, a)]
        rows = tuple(TileAxis(a.var, a.extent, BLOCK, a.role) for a in tile.axes if a not in lanes)
        body, why = tile.body, ""
        if pctx.knobs["vector_width"] > 1:
            body, why = _vector_phases(tile.body, pctx.types)
        new = Tile(tuple(lanes) + rows, body)      # one row per block: 004's lanes are its threads
        return _noted(replace_tile(kernel, new), why, _used(new, pctx.knobs, body != tile.body, False))
    budget = pctx.knobs["block_threads"]
    per_role = {}
    if any(a.role for a in tile.axes):
        # a matmul-like kernel: thread_shape's threads along M and N; another axis (a batch)
        # takes up to 16 of the threads block_threads leaves
        t_m, t_n = parse_shape(pctx.knobs["thread_shape"])
        per_role, budget = {"M": t_m, "N": t_n}, max(budget, t_m * t_n)
    per_axis = 16 if per_role else budget
    threads, blocks, mapping, ranges = [], [], {}, {}
    inner = tuple(a for a in tile.axes if a not in splits)
    vector, why = None, ""
    if pctx.knobs["vector_width"] > 1:
        why = _pointwise_reason(tile, inner, pctx.types)
        vector = None if why else inner[-1]
    for a in reversed(inner):   # innermost first: the contiguous one
        if a is vector:
            budget = _split_vector(a, budget, threads, blocks, mapping, ranges)
            continue
        # a grouped matmul's slot (role G, fuse/build.py): one per block, so that each block
        # serves one expert's rows and reads its weights once per tile
        t = 1 if a.role == "G" else min(pow2_at_least(a.extent), per_role.get(a.role, per_axis), budget)
        if t <= 1:
            blocks.append(TileAxis(a.var, a.extent, BLOCK, a.role))
            continue
        budget //= t
        if t >= a.extent:
            threads.append(TileAxis(a.var, a.extent, THREAD, a.role))
            continue
        nb = -(-a.extent // t)
        tv, bv = f"{a.var}t", f"{a.var}b"
        threads.append(TileAxis(tv, t, THREAD, a.role))
        blocks.append(TileAxis(bv, nb, BLOCK, a.role))
        mapping[a.var] = var(bv) * t + var(tv)
        ranges.update({tv: t, bv: nb})
    axes = tuple(reversed(threads)) + splits + tuple(reversed(blocks))
    body = substitute_body(tile.body, mapping, ranges) if mapping else tile.body
    if vector is not None:
        body = (stamp_widths(Loop(f"{vector.var}v", VECTOR, "vector", body), pctx.types),)
    new = Tile(axes, body)
    return _noted(replace_tile(kernel, new), why, _used(new, pctx.knobs, vector is not None, bool(per_role)))


def _used(tile: Tile, knobs, vectorised: bool, matmul: bool) -> dict:
    """The knob values in effect (Noted.used): the block's threads as split (a short axis or
    004's lanes take fewer than block_threads), vector_width 1 where nothing was vectorised,
    a matmul's thread shape as split (None: no effect on a kernel without M and N roles)."""
    threads = {"": 1, "M": 1, "N": 1}
    for a in tile.axes:
        if a.kind == THREAD:
            threads[""] *= a.extent
            threads[a.role if a.role in threads else ""] *= a.extent if a.role in ("M", "N") else 1
    return {"block_threads": threads[""],
            "vector_width": knobs["vector_width"] if vectorised else 1,
            "thread_shape": f"{threads['M']}x{threads['N']}" if matmul else None}


def _noted(kernel: TileKernel, why: str, used: dict):
    return Noted(kernel, f"vector_width {VECTOR} not used: {why}" if why else (), used)


def _pointwise_reason(tile: Tile, inner, types) -> str:
    """'' when the innermost axis can move 4 elements per thread with float4, else why not."""
    if not inner:
        return "no free axis"
    if any(a.role for a in tile.axes):
        return "a matmul-like kernel (its threads own output tiles)"
    a = inner[-1]
    if a.extent % VECTOR:
        return f"innermost axis {a.var} of {a.extent} is not a multiple of {VECTOR}"
    return body_reason(tile.body, a.var, types)


def _split_vector(a: TileAxis, budget: int, threads, blocks, mapping, ranges) -> int:
    """The innermost axis in runs of 4: a = ab * 4t + at * 4 + av (av the vector loop's
    variable); returns the thread budget left for the other axes."""
    units = a.extent // VECTOR
    av, at, ab = f"{a.var}v", f"{a.var}t", f"{a.var}b"
    ranges[av] = VECTOR
    t = min(pow2_at_least(units), budget)
    if t <= 1:                               # one run of 4: the vector loop is the whole axis
        mapping[a.var] = var(av)
        return budget
    ranges[at] = min(t, units)
    if t >= units:
        threads.append(TileAxis(at, units, THREAD))
        mapping[a.var] = var(at) * VECTOR + var(av)
    else:
        nb = -(-units // t)
        threads.append(TileAxis(at, t, THREAD))
        blocks.append(TileAxis(ab, nb, BLOCK))
        mapping[a.var] = var(ab) * (t * VECTOR) + var(at) * VECTOR + var(av)
        ranges[ab] = nb
    return budget // t


def _vector_phases(body, types):
    """A row kernel's phases (StridedLoops over the row, one element per lane per step)
    stepping 4 elements per lane, their bodies in vector loops (a reduce phase folds the 4
    into its accumulator in order); and why a phase stayed scalar ('' if none did)."""
    out, why = [], []
    for s in body:
        if isinstance(s, StridedLoop) and s.kind in ("free", "reduce"):
            reason = _phase_reason(s, types)
            if reason:
                why.append(reason)
            else:
                v = f"{s.var}v"
                inner = substitute_body(s.body, {s.var: var(s.var) + var(v)}, {s.var: s.stop, v: VECTOR})
                s = StridedLoop(s.var, s.start * VECTOR, s.stop, s.step * VECTOR, s.kind,
                                (stamp_widths(Loop(v, VECTOR, "vector", inner), types, {s.var}),), s.role, s.unroll)
        out.append(s)
    return tuple(out), "; ".join(why)


def _phase_reason(s: StridedLoop, types) -> str:
    if s.stop % VECTOR:
        return f"{s.kind} phase {s.var} of {s.stop} elements is not a multiple of {VECTOR}"
    if s.start.const or len(s.start.terms) != 1 or s.start.terms[0][1] != 1:
        return f"{s.kind} phase {s.var} does not start at the lane index"
    return body_reason(s.body, s.var, types)


def _is_lane(tile: Tile, axis: TileAxis) -> bool:
    return any(isinstance(s, StridedLoop) and str(s.start) == axis.var for s, _ in walk(tile.body))


PASS = KernelPass("005_blockify_launch", "tile", DESCRIPTION, apply, KNOBS)
