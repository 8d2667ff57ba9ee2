"""005 blockify_launch: pick the block's shape; split the free axes into BLOCK and THREAD.

A kernel whose threads cooperate on a row (it has a Combine) runs one row per block: every
other axis becomes BLOCK. Otherwise the innermost axes give their iterations to the block's
threads (consecutive threads read consecutive elements: coalesced), up to `block_threads`;
an axis split in two reads `a = ab * t + at`, and what the rounding adds beyond the axis's
extent is masked when the kernel is materialised. A split-K axis (003: a BLOCK axis of role
K) is already a grid axis: it stays, as the slowest BLOCK axis."""
from __future__ import annotations

from ...ir.index import var
from ...ir.tile_ir import BLOCK, THREAD, Combine, Tile, TileAxis, TileKernel, walk
from .knobs import Knob, Skip, pow2_at_least
from .rewrite import substitute_body

DESCRIPTION = "pick block extents; partition free axes into BLOCK and THREAD"


def _default_threads(kernel: TileKernel, target) -> int:
    return 256


KNOBS = (Knob("block_threads", (64, 128, 256, 512, 1024), _default_threads,
              "threads per block when free axes are split"),)


def _cooperative(tile: Tile) -> bool:
    return any(isinstance(s, Combine) for s, _ in walk(tile.body))


def apply(kernel: TileKernel, target, knobs):
    tile = kernel.tile()
    splits = tuple(a for a in tile.axes if a.kind == BLOCK and a.role == "K")    # split-K (003)
    if any(a.kind == BLOCK and a not in splits for a in tile.axes):
        return Skip("already has BLOCK axes")
    if not tile.axes:
        return Skip("a single thread: nothing to split")
    if _cooperative(tile):
        lanes = [a for a in tile.axes if a.kind == THREAD and not a.role and _is_lane(tile, a)]
        rows = tuple(TileAxis(a.var, a.extent, BLOCK, a.role) for a in tile.axes if a not in lanes)
        return _with_tile(kernel, Tile(tuple(lanes) + rows, tile.body))   # one row per block
    budget = knobs["block_threads"]
    # A matmul-like kernel gives each output axis at most 16 threads (a 16 x 16 block tile).
    per_axis = 16 if any(a.role for a in tile.axes) else budget
    threads, blocks, mapping, ranges = [], [], {}, {}
    for a in reversed(tuple(a for a in tile.axes if a not in splits)):   # innermost first: the contiguous one
        t = min(pow2_at_least(a.extent), per_axis, budget)
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
    return _with_tile(kernel, Tile(axes, body))


def _is_lane(tile: Tile, axis: TileAxis) -> bool:
    from ...ir.tile_ir import StridedLoop
    return any(isinstance(s, StridedLoop) and str(s.start) == axis.var for s, _ in walk(tile.body))


def _with_tile(kernel: TileKernel, tile: Tile) -> TileKernel:
    return TileKernel(kernel.name, kernel.outputs, tuple(tile if isinstance(s, Tile) else s for s in kernel.body),
                      kernel.knobs)
