"""How nvcc unrolls the loops of a Kernel-IR kernel, as the main-loop model (tune/sass_model/main_loop.py) needs it:
which loops it unrolls fully into the loop around them, and how far it unrolls a loop it keeps."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.kernel_cp_async import CpAsyncWait
from ...ir.kernel_tma import MbarrierWait

# nvcc's unrolling, in unrolled_size units, fitted to its sm_90 SASS of deplokit's matmuls: a 4x4
# register tile's k loop of 16 (832) unrolls fully, of 32 (1664) partly, an 8x4's of 16 by 4
# (nvcc's choice for an 8x8, none, the model puts at 2).
FULL_UNROLL = 1024
PARTIAL_UNROLL = 416


def const_int(e) -> int | None:
    return int(e.value) if isinstance(e, K.Const) else None


def trip_count(loop: K.For) -> int | None:
    a, b, s = const_int(loop.start), const_int(loop.stop), const_int(loop.step)
    return None if None in (a, b, s) or s <= 0 else max(0, -(-(b - a) // s))


def contains(body, kinds) -> bool:
    return any(True for _ in walk_kinds(body, kinds))


def walk_kinds(body, kinds):
    """The statements of `body` (inside loops and branches too) that are of `kinds`."""
    return (s for s in K.walk_stmts(body) if isinstance(s, kinds))


def unrolled_size(body) -> int:
    """A rough count of the instructions `body` makes once unrolled (calls, loads, statements)."""
    n = 0
    for s in body:
        if isinstance(s, K.For):
            n += (trip_count(s) or 1) * unrolled_size(s.body) if unrolled(s) else unrolled_size(s.body)
        elif isinstance(s, K.If):
            n += 1 + unrolled_size(s.then) + unrolled_size(s.orelse)
        elif isinstance(s, (K.Declare, K.Assign)):
            value = s.init if isinstance(s, K.Declare) else s.value
            n += max(1, sum(1 for x in sub_expressions(value) if isinstance(x, (K.Call, K.SharedLoad, K.GlobalLoad)))
                     if value is not None else 0)
        else:
            n += 1
    return n


def unrolled(loop: K.For) -> bool:
    """Whether nvcc unrolls `loop` fully into the loop around it: a loop marked unroll, or a
    constant loop without a barrier whose unrolled body stays under FULL_UNROLL."""
    trip = trip_count(loop)
    if trip is None or loop.rolled:
        return False
    if loop.unroll:
        return True
    if contains(loop.body, (K.Barrier, MbarrierWait, CpAsyncWait)):
        return False
    return trip * unrolled_size(loop.body) <= FULL_UNROLL


def unroll_factor(loop: K.For) -> int:
    """Iterations nvcc puts in one pass of a loop it keeps: up to 4 while under PARTIAL_UNROLL."""
    size, trip = max(1, unrolled_size(loop.body)), trip_count(loop)
    if loop.rolled:
        return 1                        # #pragma unroll 1
    if contains(loop.body, (K.Barrier, MbarrierWait, CpAsyncWait)):
        return 1                        # a staged K loop: one stage per pass
    factor = 1
    while factor < 4 and 2 * factor * size <= PARTIAL_UNROLL and (trip is None or trip % (2 * factor) == 0):
        factor *= 2
    return factor


def sub_expressions(e):
    yield e
    for name in ("a", "b", "cond", "offset", "value", "index"):
        sub = getattr(e, name, None)
        if sub is not None and not isinstance(sub, (str, int, float, bool)):
            yield from sub_expressions(sub)
    for sub in getattr(e, "args", ()) or ():
        yield from sub_expressions(sub)


__all__ = ["FULL_UNROLL", "PARTIAL_UNROLL", "unrolled", "unroll_factor", "unrolled_size", "const_int", "trip_count",
           "contains", "walk_kinds", "sub_expressions"]
