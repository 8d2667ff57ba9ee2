"""007 stage_inputs: hoist hot input slabs into shared memory (Stage nodes).

A global tensor is staged when the block reads its elements more than once (in several
phases, as RMSNorm reads x twice, or by several threads) and the slab it reads is a box:
each index component is a block-uniform origin plus at most one of the block's loop or
thread variables (plus a vector loop's variable riding on it: a2 + a2v, 4 elements of a
vectorised phase). The slab is copied once by all threads; the loads then read the copy. Each stage is stamped
with the unit its copy moves (Stage.unit: float4 where its rows allow, else one float).
A kernel's locals are on chip already: never staged, and their rows count against the
shared-memory budget.

`a_k_major` stores a matmul's A slab transposed, [k][m] (its slab axes and its loads'
indices reversed): 008 then gives the M slots quads, so a thread's A fragment for one k is
one LDS.128, as B's is. A row of the stage is then a column of A: TMA, which copies rows
as they are, does not take it (011); cp.async copies it in 4-byte units (013), a copy by
the threads loads float4 along A's rows and stores them down a column
(passes/lower/stage_transpose.py)."""
from __future__ import annotations

from ...ir.index import Affine, Gather, Var, free_vars, var
from ...ir.loop_ir import Compute, Load, Loop
from ...ir.tile_ir import BLOCK, THREAD, SlabAxis, Stage, StagedPrologue, StridedLoop, Tile, TileKernel, walk
from ..flash.flash_stage import stage_key_tiles
from ..record import KernelPass, Knob, Noted, PassContext, Skip, flag_knob, fresh_name, replace_tile
from ..stage_geometry import k_outer_loops, restamp_stages
from .knobs import combine_smem, local_smem
from .stage_prologue import find_prologues, leaf_uses_outside

DESCRIPTION = "hoist hot input slabs into Stage nodes"


KNOBS = (flag_knob("stage", "stage hot input slabs in shared memory", "staging"),
         Knob("a_k_major", (False, True), lambda k, t: False,
              "store a matmul's A slab k-major ([k][m], transposed on its way in: a synchronous copy)"))


def apply(kernel: TileKernel, pctx: PassContext):
    if kernel.flash is not None:           # the key and value tiles (flash_stage.py)
        staged = stage_key_tiles(kernel, pctx.types)
        return staged if isinstance(staged, Skip) else restamp_stages(staged, pctx.types)
    tile = kernel.tile()
    if any(isinstance(s, Stage) for s, _ in walk(tile.body)):
        return Skip("already staged")
    block_vars = {a.var for a in tile.axes if a.kind == BLOCK}
    thread_extent = {a.var: a.extent for a in tile.axes if a.kind == THREAD}
    lanes = {v for s, _ in walk(tile.body) if isinstance(s, StridedLoop) for v in free_vars(s.start)}
    riders = frozenset(s.var for s, _ in walk(tile.body) if isinstance(s, Loop) and s.kind == "vector")
    threads = 1
    for a in tile.axes:
        if a.kind == THREAD and a.var not in lanes:
            threads *= a.extent
    # a matmul's operands are staged inside its K-outer loop, a slab per K chunk (010 rings it,
    # 011 copies it by TMA), even where a permuted operand (attention's output before o_proj:
    # x[0, head, m, d]) would also be a box spanning the whole K range
    k_outer = frozenset(id(lp) for lp in k_outer_loops(tile))
    groups: dict = {}
    for s, loops in walk(tile.body):
        if not isinstance(s, Load) or s.pad is not None:   # a masked read may leave the tensor
            continue
        if s.tensor in kernel.local_names():               # already on chip
            continue
        loops = tuple(lp for lp in loops if not isinstance(lp, Tile))
        found = _scope(s, loops, block_vars, thread_extent, riders, k_outer)
        if found is None:
            continue
        depth, origin, axes, index = found
        scope = loops[depth - 1] if depth else None
        key = (id(scope), s.tensor, origin, tuple((a.dim, a.extent) for a in axes))
        accesses = threads
        for lp in loops[depth:]:
            if not (isinstance(lp, Loop) and lp.var in riders):   # a2 + a2v: a2's range counts them
                accesses *= lp.extent if isinstance(lp, Loop) else lp.stop
        groups.setdefault(key, (scope, []))[1].append((s, axes, accesses, index))
    # prologues applied while staging (stage_prologue.py): their leaf loads leave the groups
    leaf_key = {id(ld): (key, index) for key, (_, loads) in groups.items() for ld, _, _, index in loads}
    leaf_info = {id(ld): (axes, acc) for _, loads in groups.values() for ld, axes, acc, _ in loads}
    prologues = find_prologues(tile.body, leaf_key, {n: t.shape for n, t in pctx.types.items()})
    kept = leaf_uses_outside(tile.body, prologues)
    taken = {id(ld) for p in prologues for ld in p.leaves if ld.dst not in kept}
    for key, (scope, loads) in list(groups.items()):
        groups[key] = (scope, [x for x in loads if id(x[0]) not in taken])
    stages: dict = {}          # id(scope) -> [Stage]
    rewrites, reasons, used, names = {}, [], combine_smem(tile) + local_smem(kernel), []
    budget = pctx.target.static_smem_per_block

    def fits(what: str, dims, accesses: int) -> int:
        """The slab's bytes where it is read at least twice per element and fits beside the
        slabs already taken, else 0 (over budget: the reason recorded)."""
        size = 1
        for _, e in dims:
            size *= e
        if accesses < 2 * size:
            return 0
        if used + 4 * size > budget:
            reasons.append(f"{what} of {4 * size} bytes exceeds {budget} bytes of static shared memory")
            return 0
        return 4 * size

    for (scope_id, tensor, origin, dims), (scope, loads) in groups.items():
        nbytes = fits(f"{tensor}: slab", dims, sum(a for _, _, a, _ in loads))
        if not nbytes:
            continue
        used += nbytes
        name = fresh_name(f"{tensor}_smem", names, "_")
        names.append(name)
        slab = loads[0][1]
        flip = pctx.knobs.get("a_k_major", False) and k_major_eligible(slab, tile, scope)
        stages.setdefault(scope_id, []).append(Stage(name, tensor, origin, slab[::-1] if flip else slab))
        for load, _, _, index in loads:
            rewrites[id(load)] = Load(load.dst, name, index[::-1] if flip else index)
    notes = []
    for p in prologues:
        scope_id, tensor, origin, dims = p.key
        slab, accesses = leaf_info[id(p.leaves[0])]
        index = leaf_key[id(p.leaves[0])][1]
        nbytes = fits(f"{p.root.dst}: prologue slab", dims, accesses)
        if not nbytes:
            continue
        used += nbytes
        name = fresh_name("_".join(dict.fromkeys(ld.tensor for ld in p.leaves)) + "_smem", names, "_")
        names.append(name)
        stage = Stage(name, tensor, origin, slab, prologue=StagedPrologue(
            tuple(ld.tensor for ld in p.leaves), tuple(ld.dst for ld in p.leaves), tuple(p.chain), p.root.dst))
        stages.setdefault(scope_id, []).append(stage)
        rewrites[id(p.root)] = Load(p.root.dst, name, index)
        for c in p.chain[:-1]:
            rewrites[id(c)] = None
        for ld in p.leaves:
            if ld.dst not in kept:
                rewrites[id(ld)] = None
        notes.append(f"{name}: {', '.join(c.op for c in p.chain)} of {', '.join(ld.tensor for ld in p.leaves)} "
                       f"applied while staging (once per element and block), copied through registers")
    if not stages:
        return Skip("; ".join(reasons) or "no input is read more than once per block")
    def rewrite(s):
        if isinstance(s, (Load, Compute)):
            return rewrites.get(id(s), s)
        return s

    body = _place(tile.body, stages, rewrite)
    new_tile = Tile(tile.axes, tuple(stages.get(id(None), ())) + body)
    # how the threads copy each stage (float4 or scalar units), stamped for the lowering
    staged = restamp_stages(replace_tile(kernel, new_tile), pctx.types)
    return Noted(staged, tuple(notes)) if notes else staged


def k_major_eligible(slab, tile: Tile, scope) -> bool:
    """A matmul's A slab: [m][k], its rows along an M thread axis and its columns along the
    K loop inside the stage's scope. Stored k-major, a thread's M slots (in quads) read 4
    adjacent floats of one k: one LDS.128."""
    if len(slab) != 2:
        return False
    m_threads = {a.var for a in tile.axes if a.kind == THREAD and a.role == "M"}
    k_loops = {s.var for s, _ in walk(scope.body if scope is not None else tile.body)
               if isinstance(s, Loop) and s.role == "K"}
    return slab[0].var in m_threads and slab[1].var in k_loops and slab[0].dim < slab[1].dim


def _place(body, stages, rewrite):
    """Rebuild the body: loads rewritten, each scope loop's stages first in its body."""
    out = []
    for s in body:
        if isinstance(s, (Loop, StridedLoop)):
            inner = tuple(stages.get(id(s), ())) + _place(s.body, stages, rewrite)
            if isinstance(s, Loop):
                s = Loop(s.var, s.extent, s.kind, inner, s.role, s.unroll, s.stop)
            else:
                s = StridedLoop(s.var, s.start, s.stop, s.step, s.kind, inner, s.role, s.unroll)
        s = rewrite(s)
        if s is not None:                 # a prologue's loads and values: computed by its stage's copy
            out.append(s)
    return tuple(out)


def _scope(load: Load, loops, block_vars, thread_extent, riders=frozenset(), k_outer=frozenset()):
    """The outermost position in the enclosing loops at which the load reads a box: at depth
    d the variables of loops[:d] (and BLOCK axes) are fixed, loops[d:] and THREAD axes vary;
    never outside a K-outer loop (ids in `k_outer`). Returns (d, origin, slab axes, the
    load's index into the slab) or None."""
    inside = max((i + 1 for i, lp in enumerate(loops) if id(lp) in k_outer), default=0)
    for depth in range(inside, len(loops) + 1):
        if any(isinstance(lp, StridedLoop) or lp.var in riders for lp in loops[:depth]):
            break
        uniform = block_vars | {lp.var for lp in loops[:depth]}
        varying = dict(thread_extent)
        for lp in loops[depth:]:
            varying[lp.var] = lp.extent if isinstance(lp, Loop) else lp.stop
        slab = _slab(load, uniform, varying, riders, block_vars)
        if slab is not None:
            return (depth,) + slab
    return None


def _slab(load: Load, uniform, varying, riders=frozenset(), block_vars=frozenset()):
    """(origin, slab axes, index into the slab) when each index component is a uniform origin
    plus at most one varying variable (coefficient 1, each used once) and at most one vector
    variable riding on it, else None. A gathered row (x[base[p] + i, k]) may be part of the
    origin only when the block fixes it: the lowering loads such integers once, at the
    kernel's start (k001 stage_origins), so one that moves with a loop cannot be staged."""
    origin, axes, index, seen = [], [], [], set()
    for dim, e in enumerate(load.index):
        uniform_terms, slab_terms, ride = [], [], []
        for atom, c in e.terms:
            vs = free_vars(Affine(((atom, 1),), 0))
            if isinstance(atom, Gather) and not vs <= block_vars:   # chosen per thread or per step: not a box
                return None
            if vs <= uniform:
                uniform_terms.append((atom, c))
            elif isinstance(atom, Var) and c == 1 and atom.name in riders and atom.name in varying:
                ride.append(atom.name)
            elif isinstance(atom, Var) and c == 1 and atom.name in varying and atom.name not in seen:
                slab_terms.append(atom.name)
            else:
                return None
        if not slab_terms:             # a vector variable alone is an axis of its own
            slab_terms, ride = ride[:1], ride[1:]
        if len(slab_terms) > 1 or len(ride) > 1 or set(slab_terms + ride) & seen:
            return None
        origin.append(Affine(tuple(uniform_terms), e.const))
        if slab_terms:
            v = slab_terms[0]
            seen.add(v)
            seen.update(ride)
            axes.append(SlabAxis(v, varying[v], dim))
            index.append(var(v) + var(ride[0]) if ride else var(v))
    if not axes:
        return None
    return tuple(origin), tuple(axes), tuple(index)


PASS = KernelPass("007_stage_inputs", "tile", DESCRIPTION, apply, KNOBS, flash_aware=True)
