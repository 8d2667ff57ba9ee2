"""Tile IR -> Kernel IR in one call: every Kernel-IR lowering pass in order, untraced (the
tuner, check_passes and tests lower a Tile program this way; the pipeline traces each pass
as its own step). The passes are listed in deplokit.passes.lower.LOWERING."""
from __future__ import annotations

from ...ir.kernel_ir import KernelProgram
from ...ir.tile_ir import TileProgram
from ..record import Noted
from . import LOWERING


def materialize(program: TileProgram, ctx=None) -> KernelProgram:
    ir = program
    for lowering_pass in LOWERING:
        ir = lowering_pass.apply(ir, ctx)
        ir = ir.ir if isinstance(ir, Noted) else ir
    return ir
