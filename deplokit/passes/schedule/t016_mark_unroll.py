"""016 mark_unroll: annotate innermost loops with few iterations per thread for #pragma unroll.

The k loop of a register tile (008) counts as innermost: its inner loops are register loops,
always unrolled, so unrolling it copies no loop, only the multiply-adds. Fully unrolled
(knob `unroll_k`, up to 32 steps), the whole K chunk becomes straight-line code in which nvcc
merges each thread's A reads along k into LDS.128 and keeps the address arithmetic out of
the FFMA stream."""
from __future__ import annotations

from ...ir.loop_ir import Loop
from ...ir.tile_ir import StridedLoop, Tile, TileKernel, map_body
from ..record import KernelPass, Knob, PassContext, Skip, flag_knob, replace_tile

K_UNROLL_LIMIT = 32                   # steps of a register tile's k loop unrolled at most

DESCRIPTION = "annotate small inner loops for #pragma unroll"


def _default_trip(kernel, target) -> int:
    return 8


KNOBS = (Knob("max_trip", (0, 4, 8, 16, 32), _default_trip, "unroll loops of at most this many iterations"),
         flag_knob("unroll_k", f"fully unroll the k loop around a register tile (up to {K_UNROLL_LIMIT} steps)"))


def apply(kernel: TileKernel, pctx: PassContext):
    limit = pctx.knobs["max_trip"]
    marked = []

    def mark(s):
        if isinstance(s, Loop) and s.kind == "vector":
            return s                      # a vector loop is always unrolled into registers (float4)
        if isinstance(s, Loop) and not s.unroll and pctx.knobs["unroll_k"] and _is_register_k_loop(s) \
                and s.extent <= K_UNROLL_LIMIT:
            marked.append(s.var)
            return Loop(s.var, s.extent, s.kind, s.body, s.role, True, s.stop)
        if isinstance(s, (Loop, StridedLoop)) and any(_is_loop(c) for c in s.body):
            return s                      # only innermost loops: unrolling an outer one copies loops
        if isinstance(s, StridedLoop) and not s.unroll and -(-s.stop // s.step) <= limit:
            marked.append(s.var)
            return StridedLoop(s.var, s.start, s.stop, s.step, s.kind, s.body, s.role, True)
        if isinstance(s, Loop) and not s.unroll and s.extent <= limit:
            marked.append(s.var)
            return Loop(s.var, s.extent, s.kind, s.body, s.role, True, s.stop)
        return s

    tile = kernel.tile()
    body = map_body(tile.body, mark)
    if not marked:
        return Skip(f"no loop of at most {limit} iterations per thread")
    new_tile = Tile(tile.axes, body)
    return replace_tile(kernel, new_tile)


def _is_register_k_loop(s: Loop) -> bool:
    """A reduce loop over K whose inner loops are all register loops (008's nest)."""
    inner = [c for c in s.body if _is_loop(c)]
    return (s.kind == "reduce" and s.role == "K" and bool(inner)
            and all(isinstance(c, Loop) and c.kind == "register" for c in inner))


def _is_loop(s) -> bool:
    return isinstance(s, StridedLoop) or (isinstance(s, Loop) and s.kind != "vector")


PASS = KernelPass("016_mark_unroll", "tile", DESCRIPTION, apply, KNOBS)
