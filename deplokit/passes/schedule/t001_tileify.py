"""001 tileify: lift the kernel's outer free loops to THREAD axes of a Tile.

The perfectly nested free loops at the top of a Loop-IR kernel become the axes of one Tile:
every iteration is a thread. Later passes decide which threads share a block."""
from __future__ import annotations

from ...ir.loop_ir import Loop
from ...ir.tile_ir import THREAD, Tile, TileAxis, TileKernel
from .knobs import Skip

DESCRIPTION = "lift outer free Loops to thread axes"


def apply(kernel: TileKernel, target, knobs):
    if any(isinstance(s, Tile) for s in kernel.body):
        return Skip("already tiled")
    loops = [s for s in kernel.body if isinstance(s, Loop)]
    first = next((i for i, s in enumerate(kernel.body) if isinstance(s, Loop)), len(kernel.body))
    uniform = kernel.body[:first]
    if len(loops) != 1 or loops[0].kind != "free" or first != len(kernel.body) - 1:
        # a whole-tensor reduction or a scalar: one Tile with no axes; what follows the
        # first loop (the reduce, then the values and stores that need it) stays in order
        return TileKernel(kernel.name, kernel.outputs, uniform + (Tile((), kernel.body[first:]),), kernel.knobs)
    axes, body = [], (loops[0],)
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "free":
        loop = body[0]
        axes.append(TileAxis(loop.var, loop.extent, THREAD, loop.role))
        body = loop.body
    # A free loop followed by statements at the same level stays a loop inside the Tile.
    return TileKernel(kernel.name, kernel.outputs, uniform + (Tile(tuple(axes), body),), kernel.knobs)
