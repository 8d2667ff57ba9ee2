"""The copy of one Stage for one iteration, spelled unit by unit: floats or float4s (a 16-byte
cp.async) dealt out to the block's threads, or one TMA tensor-map copy of the whole box (see
k002_stage_copies.py for when copies are issued and which barriers surround them).

`m` is the kernel's LoweringState (types, ranges, threads); `p` a stage_plan.StagePlan;
`it` which iteration of the stage's K loop the copy is for: cur (the loop variable), a tile
number t (the prologue, before the loop; "zero" is 0), next (ko + prefetch, issued under
ko + prefetch < n), None (a stage outside any loop); stage_plan says which slot of the ring
that is."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import bounds, const, floordiv, mod, substitute, var
from ...ir.kernel_cp_async import CpAsync
from ...ir.kernel_expr import affine_expr, flat_offset, plus
from ...ir.kernel_tma import TmaTensorLoad
from ...ir.smem_layout import smem_size, stage_ctype
from ...ir.stages import dim_multipliers, loop_start, loop_stop, row_major_strides, transposed
from ...ir.tile_ir import Stage
from ...ir.types import HALF_DTYPES
from ...ir.value_expr import lower_value
from ...target import VECTOR
from ..tma.mbarrier_ring import elected_issue, slot_barrier
from ..tma.tma_geometry import box_bytes
from .stage_plan import PrologueTiles, StagePlan, is_pipelined, prologue_tile, ranges_in, slot_of, tile_offset


def cooperative_units(i: str, count: int, threads: int, body, rolled: bool = False) -> list:
    """Units 0..count-1 dealt out to the block's threads: a strided loop, or (one unit or
    none per thread) a plain guarded block, which keeps no loop state alive (ptxas otherwise
    spills around small copies in register-tight kernels). `rolled`: a strided loop marked
    `#pragma unroll 1` (a prologue's trips each hold their inputs and transcendental
    temporaries: unrolled by us, or partially by nvcc (up to 4 trips of an unmarked strided
    loop), their live ranges overlap and a register-tight K loop spills: llama down_proj_add
    on sm_80/120 unrolled, the 37x75x53 staged prologue on sm_80 left to nvcc)."""
    tid = K.Special("tid.x") if threads > 1 else K.Const(0, "int")
    if count > threads and count % threads == 0 and not rolled:
        # every thread copies count/threads units: a loop of known trip count, unrolled
        # (from tid, nvcc cannot see the trip count and keeps a loop with a remainder)
        r = f"{i}_r"
        unit = K.Binary("+", tid, K.Binary("*", K.Var(r), K.Const(threads, "int")))
        return [K.For(r, K.Const(0, "int"), K.Const(count // threads, "int"), K.Const(1, "int"),
                      (K.Declare(i, "int", unit),) + tuple(body), True)]
    if count > threads:
        return [K.For(i, tid, K.Const(count, "int"), K.Const(threads, "int"), tuple(body), rolled=rolled)]
    stmts = (K.Declare(i, "int", tid),) + tuple(body)
    if count == threads:
        return list(stmts)
    return [K.If(K.Binary("<", tid, K.Const(count, "int")), stmts)]


def stage_at(m, s: Stage, p: StagePlan, it):
    """(origin, buffer base or None, ranges) of the copy for iteration `it` of the loop
    (stage_plan: "cur", "next", a prologue tile, None): the origin at that K tile, the
    slot's base offset slot * size in the ring."""
    loop = p.loop
    ranges = ranges_in(m, loop)
    if it is None or loop is None:
        return s.origin, None, ranges
    ko = loop.var
    slot = slot_of(p, it)
    base = None if slot is None else K.Binary("*", slot, K.Const(smem_size(s), "int"))
    if isinstance(slot, K.Const):
        base = K.Const(int(slot.value) * smem_size(s), "int") if slot.value else None
    start = loop_start(loop)                  # the prologue's tile j is ko = start + j
    if isinstance(it, PrologueTiles):
        ranges[it.var] = it.count
        return tuple(substitute(o, {ko: start + var(it.var)}) for o in s.origin), base, ranges
    t = prologue_tile(it)
    if t is not None:
        return tuple(substitute(o, {ko: start + const(t)}) for o in s.origin), base, ranges
    d = tile_offset(p, it)
    if d:
        ranges[ko] = loop_stop(loop) - d       # ko + d < stop
        origin = tuple(substitute(o, {ko: var(ko) + d}) for o in s.origin)
        return origin, base, ranges
    return s.origin, base, ranges


def copy_units(m, s: Stage, origin, ranges, unit: int, merged: int, flat: str):
    """Copy units of `unit` floats (spanning the last `merged` slab axes when merged > 1):
    (count, shared offset Affine, per-dim global index Affines, per-dim unit extent,
    ranges with the flat unit index)."""
    slab, shape = s.slab, m.types[s.tensor].shape
    n = len(slab)
    mult = dim_multipliers(slab)
    sshape = [ax.extent for ax in slab]
    sshape[-1] += s.pad
    sstr = row_major_strides(sshape)
    axes = [(slab[k].extent, slab[k].dim, mult[k], sstr[k]) for k in range(n - merged)]
    unit_ext = [1] * len(shape)
    for ax in slab[n - merged:]:
        unit_ext[ax.dim] *= ax.extent
    if merged == 1 and unit < slab[-1].extent:
        axes.append((slab[-1].extent // unit, slab[-1].dim, unit * mult[-1], unit * sstr[-1]))
        unit_ext[slab[-1].dim] = unit
    count = 1
    for a in axes:
        count *= a[0]
    ranges = dict(ranges)
    ranges[flat] = count
    f = var(flat) if count > 1 else const(0)     # one unit: no loop, no index variable
    coords, inner = [], 1
    for ext, *_ in reversed(axes):
        c = floordiv(f, inner, ranges)
        if inner * ext < count:
            c = mod(c, ext, ranges)
        coords.append(c)
        inner *= ext
    coords.reverse()
    g = list(origin)
    for c, (ext, d, step, _) in zip(coords, axes):
        g[d] = g[d] + c * step
    # units enumerate the slab row-major, so in shared memory unit f sits at row
    # f // per_row, column (f % per_row) * unit of the padded rows
    E = slab[-1].extent
    if merged > 1:
        smem = f * unit
    elif unit < E:
        per_row = E // unit
        smem = floordiv(f, per_row, ranges) * (E + s.pad) + mod(f, per_row, ranges) * unit
    else:
        smem = f * (E + s.pad)
    return count, smem, g, unit_ext, ranges


def clamped_global(m, s: Stage, g, unit_ext, ranges):
    """(flat offset with every index clamped inside the tensor, in-bounds condition or
    None when every unit is provably inside)."""
    shape = m.types[s.tensor].shape
    exprs, cond = [], None
    for d, (e, extent) in enumerate(zip(g, shape)):
        x = affine_expr(e)
        b = bounds(e, ranges)
        if b is None or b[1] + unit_ext[d] > extent:
            c = K.Binary("<", x, K.Const(extent, "int"))
            cond = c if cond is None else K.Binary("&&", cond, c)
            x = K.Binary("min", x, K.Const(extent - unit_ext[d], "int"))
        exprs.append(x)
    return flat_offset(exprs, shape), cond


def copy_stage(m, s: Stage, p: StagePlan, it) -> list:
    """The block's threads copy one stage (sync or cp.async) for one iteration, in the units
    the schedule stamped on it (Stage.unit: float4 / cp.async 16, or one float)."""
    assert not (transposed(s) and p.kind != "async"), "k002 copies a transposed stage (stage_transpose.py)"
    origin, base, ranges = stage_at(m, s, p, it)
    unit = s.unit
    i = f"{s.name}_i"
    count, smem, g, unit_ext, ranges = copy_units(m, s, origin, ranges, unit, 1, i)
    src, cond = clamped_global(m, s, g, unit_ext, ranges)
    dst = plus(base, affine_expr(smem))
    ctype = stage_ctype(s, m.types[s.tensor].dtype)    # an integer stage stays exact (sync copies)
    half = s.dtype in HALF_DTYPES                       # the tensor's halves, copied as they are
    zero = K.Cast(ctype, K.Const(0.0)) if half else K.Const(0.0) if ctype == "float" else K.Const(0, ctype)
    if p.kind == "async":
        body = [CpAsync(s.name, dst, s.tensor, src, s.element_bytes * unit)]
        if cond is not None:       # past the end: an ordinary store of zeros
            zeros = [K.SharedStore(s.name, dst, zero)] if unit == 1 else \
                [K.SharedStore(s.name, plus(dst, K.Const(j, "int")) if j else dst, zero) for j in range(unit)] \
                if half else [K.VectorStore("shared", s.name, dst, (zero,) * 4)]
            body = [K.If(cond, tuple(body), tuple(zeros))]
    elif s.prologue is not None:
        body = prologue_copy(s, src, cond, dst, unit)
    elif half and unit != 1:
        raise ValueError(f"{s.name}: a half stage's sync copy moves one element at a time, not {unit}")
    elif unit == 1:
        value = K.GlobalLoad(s.tensor, src, ctype)
        if cond is not None:
            value = K.Select(cond, value, zero)
        body = [K.SharedStore(s.name, dst, value)]
    else:
        regs = tuple(f"{s.name}_v{j}" for j in range(4))
        vals = tuple(K.Var(r) if cond is None else K.Select(cond, K.Var(r), zero) for r in regs)
        body = [K.VectorLoad(regs, "global", s.tensor, src)]
        if (s.slab[-1].extent + s.pad) % VECTOR == 0:
            body.append(K.VectorStore("shared", s.name, dst, vals))
        else:                      # padded rows: 16-byte global load, 4-byte shared stores
            body += [K.SharedStore(s.name, plus(dst, K.Const(j, "int")) if j else dst, v)
                     for j, v in enumerate(vals)]
    return cooperative_units(i, count, m.threads, body, rolled=s.prologue is not None)


def prologue_copy(s: Stage, src, cond, dst, unit: int) -> list:
    """A prologue stage's copy of one unit through registers: each input loaded at the same
    offset (float4 where the unit is 4), the prologue computed per element (Stage.prologue,
    value_expr.lower_value), the results stored; an element past the end stores 0 as any
    stage does."""
    pro = s.prologue
    lanes = ("x", "y", "z", "w") if unit > 1 else ("",)
    out: list = []
    for t, param in zip(pro.inputs, pro.params):
        regs = tuple(f"{s.name}_{param}{c}" for c in lanes)
        out += [K.VectorLoad(regs, "global", t, src)] if unit > 1 else \
            [K.Declare(regs[0], "float", K.GlobalLoad(t, src, "float"))]
    n = 0

    def fresh(prefix):
        nonlocal n
        n += 1
        return f"{s.name}_{prefix}{n}"
    results = []
    for c in lanes:
        name = {p: f"{s.name}_{p}{c}" for p in pro.params}
        for st in pro.body:
            name[st.dst] = f"{s.name}_{st.dst}{c}"
            args = [(K.Var(name[a]), "float32") if isinstance(a, str) else (K.Const(float(a)), None)
                    for a in st.args]
            out += lower_value(name[st.dst], st.op, args, st.dtype, fresh)
        value = K.Var(name[pro.result])
        results.append(value if cond is None else K.Select(cond, value, K.Const(0.0)))
    if unit == 1:
        return out + [K.SharedStore(s.name, dst, results[0])]
    if (s.slab[-1].extent + s.pad) % VECTOR == 0:
        return out + [K.VectorStore("shared", s.name, dst, tuple(results))]
    return out + [K.SharedStore(s.name, plus(dst, K.Const(j, "int")) if j else dst, v) for j, v in enumerate(results)]


def tma_copies(m, tma, it, bar) -> list:
    """The copies of every TMA stage in `tma` ((stage, plan) pairs) for iteration `it`: one
    tensor-map copy of the stage's box at its origin for that K tile into the slot's buffer,
    each completing on `bar` (mbarrier_ring.SlotBarrier: the ring owns the barrier and the
    arrival announcing their bytes). `m.tensor_map(stage)` names the kernel's tensor-map
    parameter for the stage. Run by the one issuing thread."""
    body: list = []
    for s, p in tma:
        origin, base, _ = stage_at(m, s, p, it)
        dst = base if base is not None else K.Const(0, "int")
        for j in range(s.tma.boxes):          # a row wider than a span: boxes side by side
            at = origin[:-1] + (origin[-1] + j * s.tma.box[-1],) if j else origin
            to = dst if not j else K.Binary("+", dst, K.Const(j * s.tma.elements, "int"))
            body.append(TmaTensorLoad(s.name, to, m.tensor_map(s), tuple(affine_expr(o) for o in at),
                                      bar.name, bar.slot, expect=False))
    return body


def issue_tma(m, tma, it, before=()) -> list:
    """The elected thread's copies of the TMA stages in `tma` for iteration `it`, after
    `before` (passes/tma/mbarrier_ring.py: elected_issue)."""
    stages, plans = [s for s, _ in tma], [p for _, p in tma]
    # whole boxes (every one of a stage's): the tail lands as zeros
    nbytes = sum(box_bytes(s.tma.box, s.tma.element_bytes) * s.tma.boxes for s in stages)
    bar = slot_barrier(plans[0].loop, is_pipelined(stages, plans), slot_of(plans[0], it), nbytes)
    return elected_issue(bar, tma_copies(m, tma, it, bar), before)
