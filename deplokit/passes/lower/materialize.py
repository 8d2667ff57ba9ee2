"""Tile IR -> Kernel IR in one call, every Kernel-IR lowering pass in order (LOWERING,
deplokit/passes/lower/__init__.py): `lower_tiles` as the pipeline runs them (Compilation's
check_passes and the tuner's objectives), `materialize` untraced with no context (tests)."""
from __future__ import annotations

from ...ir.kernel_ir import KernelProgram
from ...ir.tile_ir import TileProgram
from ...trace import Context
from ..record import Noted, Skip, run_passes
from . import LOWERING


def materialize(program: TileProgram, ctx=None) -> KernelProgram:
    ir = program
    for lowering_pass in LOWERING:
        result = lowering_pass.apply(ir, ctx)
        if not isinstance(result, Skip):
            ir = result.ir if isinstance(result, Noted) else result
    return ir


def lower_tiles(program, ctx: Context):
    """A Tile program through LOWERING: its Kernel program (what Compilation.check_passes and
    the tuner's objectives lower an intermediate or a candidate schedule with)."""
    return run_passes(LOWERING, program, ctx)[0]
