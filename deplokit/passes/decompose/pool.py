"""avg_pool1d/2d and max_pool1d/2d: each output position the mean (largest) of its window,
window[..., o, j] = x[..., o * stride + j * dilation - padding] on each pooled axis, outside x
0 for the mean (counted: count_include_pad) and -inf for the largest."""
from __future__ import annotations

import math

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, var
from .builder import Builder
from .registry import rule


def _per_axis(value, n: int, what: str, op) -> tuple[int, ...]:
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,) * n
    if len(values) == 1:
        values *= n
    if len(values) != n:
        raise UnsupportedOpError(f"{op.op} (node {op.name}): {what} {value} for {n} pooled axes")
    return tuple(int(v) for v in values)


@rule("avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d")
def decompose_pool(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    n = 2 if op.op.endswith("2d") else 1
    kernel = _per_axis(op.attr("kernel_size"), n, "kernel_size", op)
    stride = _per_axis(op.attr("stride", ()) or kernel, n, "stride", op)
    padding = _per_axis(op.attr("padding", 0), n, "padding", op)
    dilation = _per_axis(op.attr("dilation", 1), n, "dilation", op)
    largest = op.op.startswith("max")
    if op.attr("ceil_mode", False):
        raise UnsupportedOpError(f"{op.op} (node {op.name}) with ceil_mode=True; deplokit pools with floor sizes")
    if not largest and not op.attr("count_include_pad", True) and any(padding):
        raise UnsupportedOpError(f"{op.op} (node {op.name}) with count_include_pad=False over padding")
    if not largest and op.attr("divisor_override", None) is not None:
        raise UnsupportedOpError(f"{op.op} (node {op.name}) with divisor_override")
    lead = len(shape) - n
    sizes = tuple((shape[lead + a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
                  for a in range(n))
    if any(s < 1 for s in sizes):
        raise UnsupportedOpError(f"{op.op} (node {op.name}): a window of {kernel} does not fit {shape[lead:]}")
    out = shape[:lead] + sizes + kernel
    index = tuple(var(DIM_NAMES[p]) for p in range(lead)) + tuple(
        var(DIM_NAMES[lead + a]) * stride[a] + var(DIM_NAMES[lead + n + a]) * dilation[a] - padding[a]
        for a in range(n))
    pad = -math.inf if largest else 0.0
    windows = b.index_map(x, index, out, "window", pad=pad)
    taps = tuple(range(lead + n, lead + 2 * n))
    if largest:
        return b.reduce("max", windows, taps, keepdim=False, hint=op.op)
    total = b.reduce("sum", windows, taps, keepdim=False, hint="window_sum")
    return b.elementwise("divide", total, float(math.prod(kernel)), hint=op.op)
