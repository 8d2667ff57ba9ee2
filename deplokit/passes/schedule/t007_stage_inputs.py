"""007 stage_inputs: hoist hot input slabs into shared memory (Stage nodes).

A global tensor is staged when the block reads its elements more than once (in several
phases, as RMSNorm reads x twice, or by several threads) and the slab it reads is a box:
each index component is a block-uniform origin plus at most one of the block's loop or
thread variables. The slab is copied once by all threads; the loads then read the copy."""
from __future__ import annotations

from ...ir.index import Affine, Gather, Var, free_vars, var
from ...ir.loop_ir import Load, Loop
from ...ir.tile_ir import BLOCK, THREAD, SlabAxis, Stage, StridedLoop, Tile, TileKernel, map_body, walk
from .knobs import Knob, Skip

DESCRIPTION = "hoist hot input slabs into Stage nodes"
STATIC_SMEM = 48 * 1024      # bytes of static __shared__ memory a block may declare


def _default_stage(kernel, target) -> bool:
    return True


KNOBS = (Knob("stage", (True, False), _default_stage, "stage hot input slabs in shared memory"),)


def apply(kernel: TileKernel, target, knobs):
    if not knobs["stage"]:
        return Skip("staging disabled by the knob")
    tile = kernel.tile()
    if any(isinstance(s, Stage) for s, _ in walk(tile.body)):
        return Skip("already staged")
    block_vars = {a.var for a in tile.axes if a.kind == BLOCK}
    extents = {a.var: a.extent for a in tile.axes}
    lanes = {str(s.start) for s, _ in walk(tile.body) if isinstance(s, StridedLoop)}
    threads = 1
    for a in tile.axes:
        if a.kind == THREAD and a.var not in lanes:
            threads *= a.extent
    groups: dict = {}
    for s, loops in walk(tile.body):
        if not isinstance(s, Load):
            continue
        slab = _slab(s, loops, block_vars, extents)
        if slab is None:
            continue
        origin, axes = slab
        key = (s.tensor, origin, tuple((a.dim, a.extent) for a in axes))
        accesses = threads
        for lp in loops:
            accesses *= lp.extent if isinstance(lp, Loop) else (lp.stop if isinstance(lp, StridedLoop) else 1)
        groups.setdefault(key, []).append((s, axes, accesses))
    stages, rewrites, reasons, used = [], {}, [], 0
    for (tensor, origin, dims), loads in groups.items():
        size = 1
        for _, e in dims:
            size *= e
        accesses = sum(a for _, _, a in loads)
        if accesses < 2 * size:
            continue
        if used + 4 * size > STATIC_SMEM:
            reasons.append(f"{tensor}: slab of {4 * size} bytes exceeds {STATIC_SMEM} bytes of static shared memory")
            continue
        used += 4 * size
        name = _fresh(f"{tensor}_smem", kernel, [st.name for st in stages])
        first_axes = loads[0][1]
        stages.append(Stage(name, tensor, origin, first_axes))
        for load, axes, _ in loads:
            rewrites[id(load)] = Load(load.dst, name, tuple(var(a.var) for a in axes))
    if not stages:
        return Skip("; ".join(reasons) or "no input is read more than once per block")

    def rewrite(s):
        return rewrites.get(id(s), s)

    body = map_body(tile.body, rewrite)
    new_tile = Tile(tile.axes, tuple(stages) + body)
    return TileKernel(kernel.name, kernel.outputs, tuple(new_tile if isinstance(s, Tile) else s for s in kernel.body),
                      kernel.knobs)


def _slab(load: Load, loops, block_vars, extents):
    """(origin, slab axes) when the load reads a box, else None."""
    loop_extent = {}
    for lp in loops:
        if isinstance(lp, Loop):
            loop_extent[lp.var] = lp.extent
        elif isinstance(lp, StridedLoop):
            loop_extent[lp.var] = lp.stop
    origin, axes, seen = [], [], set()
    for dim, e in enumerate(load.index):
        uniform_terms, slab_terms = [], []
        for atom, c in e.terms:
            if isinstance(atom, Gather):      # a data-dependent row: not a box
                return None
            vs = free_vars(Affine(((atom, 1),), 0))
            if vs <= block_vars:
                uniform_terms.append((atom, c))
            elif isinstance(atom, Var) and c == 1 and atom.name in loop_extent and atom.name not in seen:
                slab_terms.append(atom.name)
            else:
                return None
        if len(slab_terms) > 1:
            return None
        origin.append(Affine(tuple(uniform_terms), e.const))
        if slab_terms:
            v = slab_terms[0]
            seen.add(v)
            axes.append(SlabAxis(v, loop_extent[v], dim))
    if not axes:
        return None
    return tuple(origin), tuple(axes)


def _fresh(name, kernel, taken):
    n, cand = 1, name
    while cand in taken:
        cand, n = f"{name}_{n}", n + 1
    return cand
