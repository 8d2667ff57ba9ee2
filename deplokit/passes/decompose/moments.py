"""The mean of a row for centring (layer_norm, var, std), shifted by the row's first element:
mean = x[0] + sum(x - x[0]) / n. A constant row sums exact zeros, so its mean is its element
and its centred values are exact zeros (LayerNorm returns exactly the bias, var exactly 0, as
eager's Welford does); sum(x) / n would round (1000.3 x 129 sums to a mean off by 6e-5). Every
backend runs the same Tensor IR, so every backend gets it."""
from __future__ import annotations

from ...ir.index import DIM_NAMES, const, var
from .builder import Builder


def centring_mean(b: Builder, x: str, axes: tuple[int, ...], n: int) -> str:
    """mean of x over `axes` (kept as extent-1 axes), exact for a constant row."""
    shape = b.shape(x)
    index = tuple(const(0) if d in axes else var(DIM_NAMES[d]) for d in range(len(shape)))
    pivot = b.index_map(x, index, tuple(1 if d in axes else e for d, e in enumerate(shape)), f"{x}_first")
    shifted = b.reduce("sum", b.elementwise("subtract", x, pivot, hint="shifted"), axes, hint="sum")
    return b.elementwise("add", pivot, b.elementwise("divide", shifted, float(n), hint="mean_off"), hint="mean")
