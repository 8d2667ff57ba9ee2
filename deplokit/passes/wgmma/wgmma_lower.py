"""008's WarpgroupMma spelled in Kernel IR (called by lower/k001_materialize.py): each
operand's shared-memory matrix descriptor, built from its stage's layout (wgmma_tile.py)
at the operand tile's first element, then one wgmma.mma_async. The K loop holding them is
fenced before (the accumulators' earlier writes, the zeros, are seen) and committed and
waited for after: every wgmma of the K chunk has read its slabs before the ring refills
the slot and before the epilogue reads the accumulators."""
from __future__ import annotations

import dataclasses

from ...errors import DeplokitError
from ...ir.index import const, substitute
from ...ir.kernel_expr import affine_expr
from ...ir.kernel_wgmma import Wgmma, WgmmaCommit, WgmmaDescriptor, WgmmaFence, WgmmaWait
from ...ir.smem_layout import smem_offset
from ...ir.tile_ir import Loop, WarpgroupMma
from .wgmma_tile import FC, FR, operand_layout


def lower_warpgroup_mma(state, s: WarpgroupMma) -> list:
    out, descs = [], []
    for operand, name, at in (("A", s.a, s.a_at), ("B", s.b, s.b_at)):
        stage = state.stages[name]
        lay, why = operand_layout(operand, stage, at, s.n)
        if why:
            raise DeplokitError(f"{state.kernel.name}: wgmma: {why}")
        if stage.tma is None or stage.tma.swizzle != lay.span:
            raise DeplokitError(
                f"{state.kernel.name}: wgmma reads {name} through a {lay.span}-byte swizzle, so it must be a TMA "
                f"box written in it (011 tma_copy and 012 swizzle_smem enabled); it is {stage.text()}")
        start = [affine_expr(substitute(e, {FR: const(0), FC: const(0)})) for e in at]
        # the descriptor holds the unswizzled start (the hardware XORs the final addresses),
        # in the stage's boxes (the leading offset steps to the next)
        offset = smem_offset(start, dataclasses.replace(stage, tma=dataclasses.replace(stage.tma, swizzle=0)))
        desc = state.fresh(f"{s.acc}_d{operand.lower()}")
        out.append(WgmmaDescriptor(desc, name, offset, lay.leading, lay.stride, lay.span))
        descs.append((desc, lay))
    acc_at = state.register_index(s.acc, s.index + (const(0),))
    out.append(Wgmma(s.n, s.dtype, s.acc, acc_at, descs[0][0], descs[1][0], descs[1][1].mn_major))
    return out


def fenced(s, loop) -> list:
    """[loop], or fence, loop, commit, wait 0 for a loop whose body issues wgmma."""
    if isinstance(s, Loop) and any(isinstance(x, WarpgroupMma) for x in s.body):
        return [WgmmaFence(), loop, WgmmaCommit(), WgmmaWait(0)]
    return [loop]


# Tile-IR statement -> the function that lowers it (k001_materialize's FEATURE_STATEMENTS)
LOWERINGS = {WarpgroupMma: lower_warpgroup_mma}
