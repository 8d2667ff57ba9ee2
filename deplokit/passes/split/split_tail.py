"""k001's spelling of 003's in-kernel split-K reduction (Tile IR `SplitArrive`): every block
has stored its partial sum; the block counts itself in on its output tile's counter and only
the last of the tile's `splits` blocks runs what follows (the partials added in split order,
the epilogue, the output's store).

    threadfence                                   # this thread's partials, visible to the grid
    barrier                                       # ... every thread's, before the count
    shared int split_last[1]
    if tid.x == 0:
        int arrived = atomic_inc global counter[tile]
        shared split_last[0] = (arrived == splits - 1)
        if arrived == splits - 1:
            global counter[tile] = 0              # zero again for the next launch (graph replay)
    barrier
    int last = block-uniform shared split_last[0] # the broadcast: every thread reads the flag
    if last != 0:
        threadfence                               # the other blocks' partials, read after the count
        ... the statements after SplitArrive

The counter is an integer: which block comes last depends on timing, the float sum's order
(split 0, 1, 2, ...) does not, so the output is bit-identical from run to run."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.companions import SplitArrive
from ...ir.kernel_expr import affine_expr
from ...ir.kernel_split import AtomicInc, Broadcast, ThreadFence

FLAG = "split_last"


def tile_slot(block_axes, split: str) -> K.Expr:
    """The output tile's counter index: the block axes but the split one, the last fastest."""
    slot, stride = None, 1
    for a in reversed(block_axes):
        if a.var == split:
            continue
        term = K.Var(a.var) if stride == 1 else K.Binary("*", K.Var(a.var), K.Const(stride, "int"))
        slot = term if slot is None else K.Binary("+", term, slot)
        stride *= a.extent
    return slot if slot is not None else K.Const(0, "int")


def arrive(s: SplitArrive, block_axes, fresh, rest: list) -> list:
    """The fence, the count and the broadcast of `s`, then `rest` (the lowered statements after
    it) for the last block only."""
    slot = tile_slot(block_axes, s.split) if s.tile is None else affine_expr(s.tile)
    arrived = fresh("arrived")
    if s.arrivals is None:
        last = K.Binary("==", K.Var(arrived), K.Const(s.splits - 1, "int"))
    else:                    # stream-K: as many arrive as the tile has segments, a count known at run time
        last = K.Binary("==", K.Binary("+", K.Var(arrived), K.Const(1, "int")), affine_expr(s.arrivals))
    count = (
        AtomicInc(arrived, s.counter, slot),
        K.SharedStore(FLAG, K.Const(0, "int"), K.Cast("int", last)),
        K.If(last, (K.GlobalStore(s.counter, slot, K.Const(0, "int")),)),
    )
    flag = fresh("last")
    return [
        ThreadFence(),
        K.Barrier(),
        K.SharedArray(FLAG, 1, 4, "int"),
        K.If(K.Binary("==", K.Special("tid.x"), K.Const(0, "int")), count),
        K.Barrier(),
        Broadcast(flag, FLAG),
        K.If(K.Binary("!=", K.Var(flag), K.Const(0, "int")), (ThreadFence(),) + tuple(rest)),
    ]
