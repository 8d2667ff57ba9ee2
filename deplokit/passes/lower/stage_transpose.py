"""The copy of a transposed Stage (007's k-major A: slab axes in another order than the
tensor's dimensions), for one iteration.

The units are dealt out in the tensor's order, so that consecutive threads read consecutive
floats of a row of the tensor (float4 where its rows allow, as an ordinary stage's copy
does): coalesced. Each unit's floats then go to their places in the shared array one by
one, down a column of its layout. (A cp.async copy of a transposed stage moves 4-byte units
in the stage's own order instead, stage_units.copy_stage: each float lands where it belongs,
the shared writes consecutive; TMA moves whole rows and does not take such a stage.)"""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import const
from ...ir.kernel_expr import affine_expr, plus
from ...ir.stages import in_tensor_order, row_major_strides
from ...ir.tile_ir import Stage
from ...target import VECTOR
from .stage_plan import StagePlan
from .stage_units import clamped_global, cooperative_units, copy_units, stage_at


def copy_transposed(m, s: Stage, p: StagePlan, it) -> list:
    """The block's threads copy one transposed stage: global units in the tensor's order,
    stored float by float at the stage's (transposed) shared offsets."""
    origin, base, ranges = stage_at(m, s, p, it)
    in_order = in_tensor_order(s)
    unit = s.unit                        # stamped by the schedule: float4 along the tensor's rows, or 1
    i = f"{s.name}_i"
    count, _, g, unit_ext, ranges = copy_units(m, in_order, origin, ranges, unit, 1, i)
    src, cond = clamped_global(m, in_order, g, unit_ext, ranges)
    shape = [ax.extent for ax in s.slab]
    shape[-1] += s.pad
    strides = row_major_strides(shape)
    word = const(0)
    for k, ax in enumerate(s.slab):         # the unit's slab coordinates at the stage's strides
        word = word + (g[ax.dim] - origin[ax.dim]) * strides[k]
    dst = plus(base, affine_expr(word))
    inner = in_order.slab[-1].dim          # the unit's floats lie a row of the layout apart
    step = strides[next(k for k, ax in enumerate(s.slab) if ax.dim == inner)]
    zero = K.Const(0.0)
    if unit == 1:
        value = K.GlobalLoad(s.tensor, src, "float")
        body = [K.SharedStore(s.name, dst, K.Select(cond, value, zero) if cond is not None else value)]
    else:
        regs = tuple(f"{s.name}_v{j}" for j in range(VECTOR))
        body = [K.VectorLoad(regs, "global", s.tensor, src)]
        for j, r in enumerate(regs):
            v = K.Var(r) if cond is None else K.Select(cond, K.Var(r), zero)
            body.append(K.SharedStore(s.name, plus(dst, K.Const(j * step, "int")) if j else dst, v))
    return cooperative_units(i, count, m.threads, body)
