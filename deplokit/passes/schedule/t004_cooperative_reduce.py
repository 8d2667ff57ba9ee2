"""004 cooperative_reduce: let a block's threads share one row reduction.

A row kernel (reduce phases then a free phase, as RMSNorm or softmax) gets a THREAD lane
axis: every phase loop is dealt out across the lanes (StridedLoop), and after each reduce
phase a Combine merges the lanes' partial accumulators. Nested phase loops are flattened
first, so a reduction over several axes still uses every lane. A kernel with locals (row
fusion's attention) always gets lanes, however short its rows: its block holds the row."""
from __future__ import annotations

from ...ir.index import floordiv, mod, var
from ...ir.loop_ir import Loop
from ...ir.substitute import substitute_body
from ...ir.tile_ir import THREAD, Combine, StridedLoop, Tile, TileAxis, TileKernel, accumulators, used_vars
from ..record import KernelPass, Knob, PassContext, Skip, fresh_name, replace_tile
from .knobs import pow2_at_least

DESCRIPTION = "let multiple threads share one reduce; tree-merge with Combine"


def _phase_loops(tile: Tile):
    return [s for s in tile.body if isinstance(s, Loop)]


def _default_lanes(kernel: TileKernel, target) -> int:
    try:
        loops = _phase_loops(kernel.tile())
    except ValueError:
        return 256
    longest = max((_flat_extent(lp) for lp in loops), default=1)
    # enough lanes that each walks the row a few times, at most 1024 (a block's limit)
    return max(32, min(1024, pow2_at_least(longest) // 8, 256 if longest <= 8192 else 1024))


KNOBS = (Knob("lanes", (32, 64, 128, 256, 512, 1024), _default_lanes,
              "threads of a block that share one row"),)


def _flat_extent(loop: Loop) -> int:
    n = loop.extent
    while len(loop.body) == 1 and isinstance(loop.body[0], Loop) and loop.body[0].kind == loop.kind:
        loop = loop.body[0]
        n *= loop.extent
    return n


def _flatten(loop: Loop) -> Loop:
    """for a in 0..A: for b in 0..B: body  ->  for a in 0..A*B: body[a // B, a % B]."""
    if not (len(loop.body) == 1 and isinstance(loop.body[0], Loop) and loop.body[0].kind == loop.kind):
        return loop
    inner = _flatten(loop.body[0])
    flat = loop.var
    total = loop.extent * inner.extent
    ranges = {flat: total}
    mapping = {loop.var: floordiv(var(flat), inner.extent, ranges), inner.var: mod(var(flat), inner.extent, ranges)}
    return Loop(flat, total, loop.kind, substitute_body(inner.body, mapping, ranges), loop.role)


def apply(kernel: TileKernel, pctx: PassContext):
    tile = kernel.tile()
    loops = _phase_loops(tile)
    if not any(lp.kind == "reduce" for lp in loops):
        return Skip("no reduce phase at the row level")
    if any(lp.role == "K" for lp in loops):
        return Skip("a matmul reduce (K): threads own outputs instead")
    if any(a.kind == THREAD and a.role for a in tile.axes):
        return Skip("matmul-like kernel")
    lanes = pctx.knobs["lanes"]
    longest = max(_flat_extent(lp) for lp in loops)
    if longest < 32 and not kernel.locals:
        # (a kernel with locals always shares a row: its block holds the row on chip)
        return Skip(f"rows of {longest} elements: one thread per row is enough")
    lane = fresh_name("a", used_vars(kernel.body), numbered=True)
    body = []
    for s in tile.body:
        if isinstance(s, Loop):
            flat = _flatten(s)
            body.append(StridedLoop(flat.var, var(lane), flat.extent, lanes, flat.kind, flat.body, flat.role))
            if flat.kind == "reduce":
                for acc, red in accumulators(flat.body):
                    body.append(Combine(acc, red, (lane,)))
        else:
            body.append(s)
    # The lane axis is the fastest THREAD axis, so a warp's lanes share one row.
    axes = tile.axes + (TileAxis(lane, lanes, THREAD),)
    new_tile = Tile(axes, tuple(body))
    return replace_tile(kernel, new_tile)


PASS = KernelPass("004_cooperative_reduce", "tile", DESCRIPTION, apply, KNOBS)
