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
    if len(loops) != 1 or loops[0].kind != "free":
        # a whole-tensor reduction or a scalar: one Tile with no axes (one thread)
        uniform = tuple(s for s in kernel.body if not isinstance(s, Loop))
        rest = tuple(s for s in kernel.body if isinstance(s, Loop))
        return TileKernel(kernel.name, kernel.outputs, uniform + (Tile((), rest),), kernel.knobs)
    uniform = tuple(s for s in kernel.body if not isinstance(s, Loop))
    axes, body = [], (loops[0],)
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "free":
        loop = body[0]
        axes.append(TileAxis(loop.var, loop.extent, THREAD, loop.role))
        body = loop.body
    # A free loop followed by statements at the same level stays a loop inside the Tile.
    return TileKernel(kernel.name, kernel.outputs, uniform + (Tile(tuple(axes), body),), kernel.knobs)
