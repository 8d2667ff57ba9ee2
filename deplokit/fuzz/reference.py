"""The fuzzer's reference: torch eager in float32 (what a backend must match) and how far
float32 rounding alone may move each output (its spread), from float64 runs of the program.

The float64 runs go through a TorchFunctionMode that widens every float32 tensor an op meets
(module weights too), so any program runs. The second of them also moves the inputs and every
op's float result by about one float32 rounding (2**-24 relative, random): a chain whose
output that moves a lot is ill-conditioned (a layer norm of a constant row, a sine of a large
sum), and a compiled program that rounds in another order may differ from eager by as much.
A sum's result moves by one rounding of the sum of its terms' magnitudes (the op run again on
|inputs|), not of the result: a long sum in another order (a split K, a tree) differs by about
that, and a discontinuous op after it (a remainder, a floor) may then jump. One rounding of
the magnitudes is far below any lost or doubled term, so the slack hides none.

Attention runs on torch's math backend, the op's definition: the CPU's fused kernel drops a NaN
score from its running max (a query holding a NaN gives finite rows there), where the
definition, and a GPU, give NaN.
"""
from __future__ import annotations

import warnings

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

ROUNDING = 2.0 ** -24          # float32's unit roundoff
# Ops that sum terms (torch function and method names): linear in each float input, so the
# op on |inputs| is the sum of the terms' magnitudes.
SUMS = frozenset({"sum", "nansum", "mean", "matmul", "__matmul__", "mm", "bmm", "mv", "dot", "linear", "addmm",
                  "addmv", "baddbmm", "einsum", "tensordot", "cumsum", "conv1d", "conv2d"})


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
        if self.gen is None:
            return out
        if name in SUMS and isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.numel():
            magnitude = func(*tree_map(_magnitude, args), **tree_map(_magnitude, kwargs))
            return out + ROUNDING * magnitude * torch.randn(out.shape, generator=self.gen, dtype=out.dtype)
        return tree_map(self._round, out)

    def _round(self, t):
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel():
            return move(t, self.gen)
        return t


def _widen(t):
    return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t


def _magnitude(t):
    return t.abs() if isinstance(t, torch.Tensor) and t.dtype == torch.float64 else t


def move(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return t * (1 + ROUNDING * torch.randn(t.shape, generator=gen, dtype=t.dtype))


def reference(fn, inputs):
    """(eager float32 outputs, per output the largest of |float32 - float64| and |float64 -
    float64 with every rounding moved|, or None where float64 cannot run the program)."""
    with torch.no_grad(), warnings.catch_warnings(), sdpa_kernel(SDPBackend.MATH):
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
