"""016 mark_unroll: annotate innermost loops with few iterations per thread for #pragma unroll."""
from __future__ import annotations

from ...ir.loop_ir import Loop
from ...ir.tile_ir import StridedLoop, Tile, TileKernel, map_body
from ..record import KernelPass, Knob, PassContext, Skip, replace_tile

DESCRIPTION = "annotate small inner loops for #pragma unroll"


def _default_trip(kernel, target) -> int:
    return 8


KNOBS = (Knob("max_trip", (0, 4, 8, 16, 32), _default_trip, "unroll loops of at most this many iterations"),)


def apply(kernel: TileKernel, pctx: PassContext):
    limit = pctx.knobs["max_trip"]
    marked = []

    def mark(s):
        if isinstance(s, Loop) and s.kind == "vector":
            return s                      # a vector loop is always unrolled into registers (float4)
        if isinstance(s, (Loop, StridedLoop)) and any(_is_loop(c) for c in s.body):
            return s                      # only innermost loops: unrolling an outer one copies loops
        if isinstance(s, StridedLoop) and not s.unroll and -(-s.stop // s.step) <= limit:
            marked.append(s.var)
            return StridedLoop(s.var, s.start, s.stop, s.step, s.kind, s.body, s.role, True)
        if isinstance(s, Loop) and not s.unroll and s.extent <= limit:
            marked.append(s.var)
            return Loop(s.var, s.extent, s.kind, s.body, s.role, True)
        return s

    tile = kernel.tile()
    body = map_body(tile.body, mark)
    if not marked:
        return Skip(f"no loop of at most {limit} iterations per thread")
    new_tile = Tile(tile.axes, body)
    return replace_tile(kernel, new_tile)


def _is_loop(s) -> bool:
    return isinstance(s, StridedLoop) or (isinstance(s, Loop) and s.kind != "vector")


PASS = KernelPass("016_mark_unroll", "tile", DESCRIPTION, apply, KNOBS)
