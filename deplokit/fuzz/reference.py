"""The fuzzer's reference: torch eager in float32 (what a backend must match) and how far
float32 rounding alone may move each output (its spread), from float64 runs of the program.

The float64 runs go through a TorchFunctionMode that widens every float32 tensor an op meets
(module weights too), so any program runs. The second of them also moves the inputs and every
op's float result by about one float32 rounding (2**-24 relative, random): a chain whose
output that moves a lot is ill-conditioned (a layer norm of a constant row, a sine of a large
sum), and a compiled program that rounds in another order may differ from eager by as much.
"""
from __future__ import annotations

import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

ROUNDING = 2.0 ** -24          # float32's unit roundoff


class _Float64(TorchFunctionMode):
    """Run ops in float64; with a generator, move each float result by ~one rounding."""

    def __init__(self, gen: torch.Generator | None = None):
        super().__init__()
        self.gen = gen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") or name == "__setitem__":
            return func(*args, **(kwargs or {}))      # in place: its tensor keeps its dtype
        args, kwargs = tree_map(_widen, (args, kwargs or {}))
        out = func(*args, **kwargs)
        return out if self.gen is None else tree_map(self._round, out)

    def _round(self, t):
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel():
            return move(t, self.gen)
        return t


def _widen(t):
    return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t


def move(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return t * (1 + ROUNDING * torch.randn(t.shape, generator=gen, dtype=t.dtype))


def reference(fn, inputs):
    """(eager float32 outputs, per output the largest of |float32 - float64| and |float64 -
    float64 with every rounding moved|, or None where float64 cannot run the program)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e32 = tree_leaves(fn(*inputs))
        try:
            gen = torch.Generator().manual_seed(0)
            wide = [_widen(t) for t in inputs]
            with _Float64():
                e64 = tree_leaves(fn(*wide))
            moved = [move(t, gen) if t.dtype == torch.float64 else t for t in wide]
            with _Float64(gen):
                e64m = tree_leaves(fn(*moved))
        except Exception:  # noqa: BLE001 -- a program float64 cannot run: no slack
            return e32, [None] * len(e32)
    spread = []
    for a, b, m in zip(e32, e64, e64m):
        if not a.dtype.is_floating_point or a.shape != b.shape or a.shape != m.shape:
            spread.append(None)
            continue
        gap = torch.cat([(a.double() - b.double()).abs().flatten(), (b.double() - m.double()).abs().flatten()])
        gap = gap[torch.isfinite(gap)]
        spread.append(float(gap.max()) if gap.numel() else 0.0)
    return e32, spread
