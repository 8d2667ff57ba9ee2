"""Combine -> Kernel IR: a shuffle-xor tree within each warp, then (past one warp) one
exchange of the warp partials through shared memory behind a single barrier."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.tile_ir import Combine
from ...ir.types import shared_ctype
from ...ir.value_expr import combine_expr
from ...target import WARP_SIZE


def lower_combine(state, s: Combine) -> list:
    """The lane axis is the fastest THREAD axis, so the threads of one row group are
    consecutive: group = tid / E, warp in group = lane / 32. `state` is the kernel's
    LoweringState."""
    (axis_var,) = s.over
    thread_axes = state.thread_axes
    if thread_axes[-1].var != axis_var:
        raise ValueError(f"{state.kernel.name}: Combine over {axis_var}, which is not the fastest THREAD axis")
    extent = thread_axes[-1].extent
    dtype = state.dtypes.get(s.acc, "float32")     # an integer sum combines exactly, as an integer

    if s.slots:
        return _transposed(s, axis_var, extent, dtype)

    def fold(other):
        return K.Assign(s.acc, combine_expr(s.reduction, K.Var(s.acc), other, dtype))

    out: list = []
    off = min(WARP_SIZE // 2, extent // 2)
    while off >= 1:
        out.append(fold(K.Shuffle(K.Var(s.acc), off)))
        off //= 2
    if extent > WARP_SIZE:
        warps = extent // WARP_SIZE
        groups = state.threads // extent
        arr = f"{s.acc}_smem"
        lane = K.Binary("&", K.Var(axis_var), K.Const(WARP_SIZE - 1, "int"))
        base = K.Const(0, "int") if groups == 1 else \
            K.Binary("*", K.Binary("/", K.Special("tid.x"), K.Const(extent, "int")), K.Const(warps, "int"))
        slot = K.Binary("/", K.Var(axis_var), K.Const(WARP_SIZE, "int"))
        if groups > 1:
            slot = K.Binary("+", base, slot)
        out += [K.SharedArray(arr, warps * groups, ctype=shared_ctype(dtype)),
                K.If(K.Binary("==", lane, K.Const(0, "int")), (K.SharedStore(arr, slot, K.Var(s.acc)),)),
                K.Barrier(),
                K.Assign(s.acc, K.SharedLoad(arr, base))]
        w = f"{s.acc}_w"
        at = K.Var(w) if groups == 1 else K.Binary("+", base, K.Var(w))
        out.append(K.For(w, K.Const(1, "int"), K.Const(warps, "int"), K.Const(1, "int"),
                         (fold(K.SharedLoad(arr, at)),), True))
    return out


def _transposed(s: Combine, lane: str, lanes: int, dtype: str) -> list:
    """A register tile of `s.slots` partials over `lanes` lanes (within a warp). Reduce-scatter:
    at each xor step m (lanes/2 .. 1) the window halves; a lane with bit m set keeps the upper
    half and sends the lower one, so each pair costs one shuffle and one add, and lane l ends
    with the full slots l * c .. l * c + c - 1 (c = slots / lanes) in slots 0 .. c - 1:
    (lanes - 1) / lanes shuffles a slot where an all-reduce takes log2 lanes. Gather: every
    slot back to every lane, one broadcast shuffle a slot from the lane that owns it (the
    inverse butterfly would take (lanes - 1) / lanes shuffles a slot but two selects each)."""
    if lanes > WARP_SIZE or s.slots % lanes:
        raise ValueError(f"Combine over {lanes} lanes of a {s.slots}-slot tile: not within a warp")

    def slot(i):
        return K.RegLoad(s.acc, K.Const(i, "int"))

    def up(m):
        return K.Binary("!=", K.Binary("&", K.Var(lane), K.Const(m, "int")), K.Const(0, "int"))

    out: list = []
    c = s.slots // lanes
    if s.reduction != "gather":
        m = lanes // 2
        while m >= 1:
            h = m * c
            for i in range(h):
                keep = K.Select(up(m), slot(i + h), slot(i))
                send = K.Select(up(m), slot(i), slot(i + h))
                out.append(K.Assign(s.acc, combine_expr(s.reduction, keep, K.Shuffle(send, m), dtype),
                                    K.Const(i, "int")))
            m //= 2
        return out
    # slot k from slot k % c of lane k // c, one broadcast a slot, the highest first: the slots
    # below c, the ones read, are written last
    return [K.Assign(s.acc, K.Shuffle(slot(k % c), k // c, lanes), K.Const(k, "int"))
            for k in reversed(range(s.slots))]
