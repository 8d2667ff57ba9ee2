"""009 permute_register_tile: reorder the register strip so bank-conflicting loads land on far columns.

The conflict. With a contiguous register layout (008 layout=contiguous) thread t's slots
r = 0..TN-1 are the adjacent columns t*TN + r. At every k, slot r of the 16 N-threads of a
warp reads row k of the B tile at columns t*TN + r: 16 words TN apart, which span only
32/TN banks: for TN = 4, threads t and t + 8 are 32 words apart, the same bank, so every
B load of the strip takes 2 wavefronts (4 for TN = 8). (The two M-rows of a warp read the
same words: broadcasts, free.) Counted with deplokit.analysis.banks:

    b_smem[a2i, a1t * 4 + a1r]                      degree 2 for every slot a1r
    b_smem[a2i, a1t * 4 + (a1r + a1t // 8) % 4]     degree 1

The fix. A thread's strip is a set of columns, and the order in which its slots walk them
is free: slot r of thread t takes column t*TN + (r + t // d) % TN, a rotation by the
thread's group t // d. Threads that collide on a bank (t and t + 32/TN) sit in different
groups, so at the same slot they read columns 1 apart ("far" from the colliding one) in
different banks. Each slot's accumulator keeps its column (the rotation is applied to every
index of the kernel, loads and the epilogue's stores alike, but not to the register array's
own index), so the result is unchanged: the same sums, in the same order. The group size d
is chosen by counting: each candidate (d = 1, 2, 4, .. per contiguous M or N register axis)
is priced in wavefronts over every shared-memory load of the kernel, and the cheapest wins
if it beats doing nothing. The same rotation serves a contiguous M axis, whose two rows per
warp are TM*BK words apart.

The default strided layout (r*16 + t) has no such conflict: one slot's lanes read 16
consecutive words, and the pass says so and leaves the kernel alone.
"""
from __future__ import annotations

import dataclasses

from ...analysis.banks import smem_loads
from ...ir.index import Affine, Mod, Var, floordiv, free_vars, mod, var
from ...ir.loop_ir import Accumulate, Load, Loop, Store
from ...ir.substitute import substitute_body
from ...ir.tile_ir import AtomicAdd, StridedLoop, Tile, TileKernel, walk
from ..record import KernelPass, PassContext, Skip, flag_knob, replace_tile
from ..stage_geometry import restamp_loads
from .t008_register_tile import role_pair

DESCRIPTION = "reorder the register strip so bank-conflicting loads land on far columns"

KNOBS = (flag_knob("permute", "rotate each thread's register strip by its thread group against bank conflicts",
                   "permutation"),)


def _coef(e: Affine, name: str) -> int:
    return sum(c for a, c in e.terms if isinstance(a, Var) and a.name == name)


def _layout(tile: Tile, reg: Loop, t_var: str, t_extent: int) -> str | None:
    """How slot `reg` maps to the output axis, read off the kernel's indices."""
    for s, _ in walk(tile.body):
        if isinstance(s, (Store, AtomicAdd, Load)):
            for e in s.index:
                r, t = _coef(e, reg.var), _coef(e, t_var)
                if r == 1 and t == reg.extent:
                    return "contiguous"
                if r == t_extent and t == 1:
                    return "strided"
                if r == 0 and t == 4 and reg.var in free_vars(e):
                    return "quads"
    return None


def _cost(kernel: TileKernel) -> int:
    return sum(ld.wavefronts for ld in smem_loads(kernel))


def apply(kernel: TileKernel, pctx: PassContext):
    tile = kernel.tile()
    regs: dict[str, Loop] = {}
    for s, _ in walk(tile.body):
        if isinstance(s, Loop) and s.kind == "register":
            regs.setdefault(s.var, s)
    if not regs:
        return Skip("no register tile (008 did not apply)")
    if _warp_tiled(tile):
        return Skip("warps register layout: a lane's slots are quads of its warp's sub-tile, "
                    "each one float4 load (a rotation would split them)")
    if any(_has_mod_of(tile, r) for r in regs):
        return Skip("register strip already permuted")
    contiguous = []
    for reg in regs.values():
        pair = role_pair(tile, reg.role)
        if pair is None:
            continue
        t = pair[0]
        if _layout(tile, reg, t.var, t.extent) == "contiguous":
            contiguous.append((reg, t))
    if not contiguous and any(_layout(tile, reg, p[0].var, p[0].extent) == "quads"
                              for reg in regs.values() for p in [role_pair(tile, reg.role)] if p):
        return Skip("quads register layout: a lane's 4 adjacent slots are one float4 load, conflict-free")
    if not contiguous:
        return Skip("strided register layout: one slot's lanes read consecutive floats, no bank conflict to move")
    loads = smem_loads(kernel)
    base = sum(ld.wavefronts for ld in loads)
    if all(ld.degree <= 1 for ld in loads):
        return Skip("the register strip's shared-memory loads are already conflict-free")
    best, best_cost = kernel, base
    for reg, t in contiguous:                   # one axis at a time, keeping the best so far
        current = best
        d = 1
        while d < t.extent:
            cand = _permute(current, reg, t, d)
            cost = _cost(cand)
            if cost < best_cost:
                best, best_cost = cand, cost
            d *= 2
    if best is kernel:
        return Skip(f"no rotation of the register strip lowers its bank conflicts ({base} wavefronts)")
    return restamp_loads(best)          # a rotated strip's slots are no longer quads of one float4


def _warp_tiled(tile: Tile) -> bool:
    """008's warps layout: an index mixes the M and N thread variables (a lane's place in its
    warp depends on both)."""
    pairs = [role_pair(tile, role) for role in ("M", "N")]
    if None in pairs:
        return False
    both = {pairs[0][0].var, pairs[1][0].var}
    return any(both <= free_vars(e) for s, _ in walk(tile.body) if isinstance(s, (Load, Store, AtomicAdd))
               for e in s.index)


def _has_mod_of(tile: Tile, r: str) -> bool:
    for s, _ in walk(tile.body):
        if isinstance(s, (Load, Store, AtomicAdd)):
            for e in s.index:
                # a rotation mixes the slot with the thread index (008's quads take r % 4 alone)
                if any(isinstance(a, Mod) and r in free_vars(a.expr) and len(free_vars(a.expr)) > 1
                       for a, _ in e.terms):
                    return True
    return False


def _permute(kernel: TileKernel, reg: Loop, t, d: int) -> TileKernel:
    """Slot r of thread t takes column (r + t // d) % TR of its strip, in every index but
    the register tile's own."""
    ranges = {reg.var: reg.extent, t.var: t.extent}
    col = mod(var(reg.var) + floordiv(var(t.var), d, ranges), reg.extent, ranges)
    tile = kernel.tile()
    tiles = {s.acc for s, _ in walk(tile.body) if isinstance(s, Accumulate) and s.index}
    body = _rewrite(tile.body, {reg.var: col}, ranges, tiles)
    new_tile = Tile(tile.axes, body)
    return replace_tile(kernel, new_tile)


def _rewrite(body, mapping, ranges, tiles):
    out = []
    for s in body:
        if isinstance(s, (Loop, StridedLoop)):
            s = dataclasses.replace(s, body=_rewrite(s.body, mapping, ranges, tiles))
        elif isinstance(s, Accumulate) or (isinstance(s, Load) and s.tensor in tiles):
            pass                                 # the register array keeps its slot index
        else:
            s = substitute_body((s,), mapping, ranges)[0]
        out.append(s)
    return tuple(out)


PASS = KernelPass("009_permute_register_tile", "tile", DESCRIPTION, apply, KNOBS)
