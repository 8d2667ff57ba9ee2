"""Register quads -> shared float4 loads: 4 slots of a register loop that read 4 adjacent,
16-byte aligned floats of a staged slab (008's quads and warps layouts, a k-major A) are one
LDS.128, spelled as such in Kernel IR. The schedule decides which (Load.shared_width,
stamped with the stage's copy: stage_geometry.restamp_loads); this module spells it.

nvcc would merge the 4 scalar loads of the unrolled loop by itself where it can prove the
alignment; spelling the float4 makes it independent of that proof and lets the simulator
count the load as the hardware serves it (8 lanes a phase: its bank conflicts are those of
the LDS.128, runtime/sim/banks.py).

    for a1r in 0..8:  # register (N)                for a1rq in 0..2:  (unrolled)
        in1 = load b_smem[a2i, a1t * 4            ->    in1_x, in1_y, in1_z, in1_w = shared float4 b_smem[...a1rq...]
                  + (a1r // 4) * 64 + a1r % 4]          for a1rv in 0..4:  (unrolled)
        ...                                                 int a1r = a1rq * 4 + a1rv
                                                            float in1 = a1rv == 0 ? in1_x : (a1rv == 1 ? in1_y : ...)
                                                            ...
"""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import const, substitute, var
from ...ir.kernel_expr import affine_expr
from ...ir.loop_ir import Load, Loop
from ...ir.smem_layout import smem_offset
from ...ir.substitute import substitute_body
from ...target import VECTOR

LANES = "xyzw"


def quad_loads(m, loop: Loop) -> list[Load]:
    """The loads right in `loop`'s body (a register loop) that the schedule stamped one
    shared float4 per 4 slots (Load.shared_width, vector_geometry.register_quad_width)."""
    if loop.kind != "register" or loop.extent % VECTOR:
        return []
    return [s for s in loop.body if isinstance(s, Load) and s.tensor in m.stages and s.shared_width == VECTOR]


def lower_quads(m, loop: Loop, loads: list[Load]) -> list:
    """The register loop as an unrolled loop over its quads: the quad loads as shared float4
    loads, then the 4 slots, each taking its component."""
    q, v = f"{loop.var}q", f"{loop.var}v"
    quads = loop.extent // VECTOR
    m.ranges[q], m.ranges[v] = quads, VECTOR
    first = var(q) * VECTOR if quads > 1 else const(0)       # slot 4q (one quad: no q loop)
    head = []
    for s in loads:
        index = [substitute(e, {loop.var: first}, m.ranges) for e in s.index]
        stage = m.stages[s.tensor]
        head.append(K.VectorLoad(tuple(f"{s.dst}_{c}" for c in LANES), "shared", stage.name,
                                 smem_offset([affine_expr(e) for e in index], stage)))
    picks = {s.dst: _component(s.dst, v) for s in loads}
    m.quad_picks.update(picks)
    try:                                 # slot r is 4q + v in every index of the body
        body = m.stmts(substitute_body(loop.body, {loop.var: first + var(v)}, m.ranges))
    finally:
        for name in picks:
            del m.quad_picks[name]
    inner = K.For(v, K.Const(0, "int"), K.Const(VECTOR, "int"), K.Const(1, "int"), tuple(body), True)
    if quads == 1:
        return head + [inner]
    return [K.For(q, K.Const(0, "int"), K.Const(quads, "int"), K.Const(1, "int"), tuple(head) + (inner,), True)]


def _component(dst: str, v: str) -> K.Expr:
    """Component v (0..3, a compile-time constant once unrolled) of the float4 dst_x..dst_w."""
    out: K.Expr = K.Var(f"{dst}_w")
    for i in (2, 1, 0):
        out = K.Select(K.Binary("==", K.Var(v), K.Const(i, "int")), K.Var(f"{dst}_{LANES[i]}"), out)
    return out
