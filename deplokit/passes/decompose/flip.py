"""flip and roll: each position of some axes read from another position of the same axis,
n - 1 - i (flip) or (i - shift) mod n (roll); one index map either way."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, const, mod, var
from .builder import Builder
from .registry import rule


@rule("flip")
def decompose_flip(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    dims = {d % len(shape) for d in _ints(op.attr("dims"))}
    if not any(shape[p] > 1 for p in dims):
        return x
    index = tuple(const(shape[p] - 1) - var(DIM_NAMES[p]) if p in dims else var(DIM_NAMES[p])
                  for p in range(len(shape)))
    return b.index_map(x, index, shape, "flip")


@rule("roll")
def decompose_roll(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    shifts, dims = _ints(op.attr("shifts")), _ints(op.attr("dims", ()))
    if not dims:            # torch.roll without dims rolls the flattened tensor, then restores the shape
        numel = 1
        for n in shape:
            numel *= n
        flat = b.reshape(x, (numel,), "roll_flat")
        rolled = _roll(b, flat, {0: shifts[0]})
        return b.reshape(rolled, shape, "roll") if rolled != flat else x
    by_axis: dict[int, int] = {}
    for s, d in zip(shifts, dims):          # a repeated axis rolls by the shifts' sum
        p = d % len(shape)
        by_axis[p] = by_axis.get(p, 0) + s
    return _roll(b, x, by_axis)


def _roll(b: Builder, x: str, by_axis: dict) -> str:
    shape = b.shape(x)
    index = []
    for p, n in enumerate(shape):
        i = var(DIM_NAMES[p])
        s = by_axis.get(p, 0) % n if n else 0
        index.append(mod(i + (n - s), n, {DIM_NAMES[p]: n}) if s else i)
    if all(by_axis.get(p, 0) % n == 0 for p, n in enumerate(shape) if n):
        return x
    return b.index_map(x, tuple(index), shape, "roll")


def _ints(v) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)
