"""pad: out[..., i, ...] = x[..., i - before, ...] on each padded axis, the value outside x
(constant: one index map with a pad value; a negative amount crops) or x[(i - before) mod n]
(circular)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, mod, var
from .builder import Builder
from .registry import rule


@rule("pad")
def decompose_pad(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    amounts = tuple(op.attr("pad"))
    mode = op.attr("mode", "constant")
    if len(amounts) % 2 or len(amounts) // 2 > len(shape):
        raise UnsupportedOpError(f"pad (node {op.name}) of {len(amounts)} amounts for {len(shape)} axes")
    if mode not in ("constant", "circular"):
        raise UnsupportedOpError(f"pad (node {op.name}) in mode {mode!r}; deplokit pads in 'constant' and "
                                 f"'circular' modes")
    before = [0] * len(shape)
    after = [0] * len(shape)
    for k in range(len(amounts) // 2):          # the pairs run from the last axis backwards
        before[-1 - k], after[-1 - k] = amounts[2 * k], amounts[2 * k + 1]
    out = tuple(n + lo + hi for n, lo, hi in zip(shape, before, after))
    if any(n <= 0 for n in out):
        raise UnsupportedOpError(f"pad (node {op.name}) crops an axis to nothing: {shape} -> {out}")
    if mode == "circular":
        if any(lo > n or hi > n for n, lo, hi in zip(shape, before, after)):
            raise UnsupportedOpError(f"circular pad (node {op.name}) wider than its axis: {amounts} for {shape}")
        index = tuple(mod(var(DIM_NAMES[p]) + (n - lo), n, {DIM_NAMES[p]: out[p]}) if lo or hi
                      else var(DIM_NAMES[p]) for p, (n, lo, hi) in enumerate(zip(shape, before, after)))
        return b.index_map(x, index, out, "pad")
    value = op.attr("value", None)
    value = 0 if value is None else value
    value = bool(value) if b.type(x).dtype == "bool" else value
    index = tuple(var(DIM_NAMES[p]) - lo for p, lo in enumerate(before))
    return b.index_map(x, index, out, "pad", pad=value)
