"""The width of a kernel's index arithmetic, decided once (KernelFunc.index_bits).

32-bit ints are faster (one register, cheaper multiplies) and enough while every value the
index arithmetic forms stays below 2**31: the flat offsets of the accesses (each below its
tensor's element count, since a guarded index is clamped into the tensor), the flat thread
id of the launch (blocks x threads), and every partial sum of every index expression over the
ranges of its loop variables. A kernel where any of them may reach 2**31 computes its indices
in 64 bits (`long long`) instead: a 2**31-element tensor gets correct offsets, never wrapped ones."""
from __future__ import annotations

from ...ir.index import Affine, FloorDiv, Gather, Mod, Var
from ...ir.loop_ir import Load, Loop, Store
from ...ir.tile_ir import StridedLoop, Tile, walk

INT32_MAX = 2 ** 31 - 1


def index_bits(kernel, types, launch_threads: int) -> int:
    """32 or 64 for `kernel` (a Tile-IR kernel) given its tensors' types."""
    return 64 if max_index_value(kernel, types, launch_threads) > INT32_MAX else 32


def max_index_value(kernel, types, launch_threads: int) -> int:
    """An upper bound of every magnitude the kernel's index arithmetic forms."""
    local = {b.name: b.type for b in kernel.locals}
    top = launch_threads
    for s, loops in walk(kernel.body):
        if isinstance(s, StridedLoop):     # its variable passes the stop by up to one step
            top = max(top, s.stop + abs(s.step))
        if not isinstance(s, (Load, Store)):
            continue
        t = types.get(s.tensor) or local.get(s.tensor)
        if t is None:
            continue
        top = max(top, t.numel)
        ranges = _ranges(loops)
        for e, extent in zip(s.index, t.shape):
            top = max(top, _magnitude(e, ranges, extent))
    return top


def _ranges(loops) -> dict[str, int]:
    out: dict[str, int] = {}
    for lp in loops:
        if isinstance(lp, Tile):
            out.update((a.var, a.extent) for a in lp.axes)
        elif isinstance(lp, Loop):
            out[lp.var] = lp.extent
        elif isinstance(lp, StridedLoop):
            out[lp.var] = lp.stop
    return out


def _magnitude(e: Affine, ranges, extent: int) -> int:
    """The largest magnitude any partial sum of e reaches (an unbounded atom, a gathered id,
    counts as the extent its component is clamped to)."""
    total = abs(e.const)
    for atom, c in e.terms:
        total += abs(c) * _atom_magnitude(atom, ranges, extent)
    return total


def _atom_magnitude(atom, ranges, extent: int) -> int:
    if isinstance(atom, Var):
        return max(ranges.get(atom.name, extent) - 1, 0)
    if isinstance(atom, (FloorDiv, Mod)):
        inner = _magnitude(atom.expr, ranges, extent)
        return max(inner, atom.divisor) if isinstance(atom, FloorDiv) else inner
    if isinstance(atom, Gather):
        return extent
    return extent
