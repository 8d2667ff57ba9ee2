"""Refuse, before computing it, an eager result too large to compile.

`-c` text is evaluated once to find the inputs and the output;
`x.expand(2**16, 2**15) * 2` would allocate 8.6 GB there before capture could refuse it.
Under `size_guard()` every torch op is first run on meta tensors (shapes only); an op
whose result would have 2**31 elements or more raises ExpressionError (deplokit.compile,
which captures shapes only, compiles such programs: their kernels index in 64 bits).

With `shapes_only=True` an op with a meta argument returns the meta result and is never
computed: the evaluation hands the inputs on as meta tensors, so the work that depends on
them (a 4096² bf16 matmul takes minutes on a CPU) is only shape-checked. An op that has no
meta kernel (`item()`, data-dependent shapes) raises NeedsValues: evaluate eagerly instead.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import ExpressionError

MAX_ELEMENTS = 2**31 - 1     # 8 GiB of float32: more than an eager evaluation should allocate


def _meta(x):
    return x.to("meta") if isinstance(x, torch.Tensor) and not x.is_meta else x


class NeedsValues(Exception):
    """The shapes-only evaluation cannot stand for the eager one (an op that needs real values,
    a factory shaped like an input, an error whose message should be eager's)."""


class _SizeGuard(TorchDispatchMode):
    def __init__(self, shapes_only: bool):
        super().__init__()
        self.shapes_only = shapes_only

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            meta_kwargs = tree_map(_meta, kwargs)
            if not any(isinstance(a, torch.Tensor) for a in tree_flatten(args)[0]) and any(
                    a.name == "device" for a in func._schema.arguments):
                meta_kwargs["device"] = torch.device("meta")   # a factory: make it on meta
            shapes = func(*tree_map(_meta, args), **meta_kwargs)
        except Exception:    # no meta kernel (item(), ...): nothing to foresee
            shapes = None
        for t in tree_flatten(shapes)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > MAX_ELEMENTS:
                raise ExpressionError(f"{func.__name__} would make a tensor of shape {tuple(t.shape)}: "
                                      f"{t.numel()} elements, more than {MAX_ELEMENTS} (2**31 - 1), which the "
                                      f"eager evaluation of the expression would allocate; refused before "
                                      f"computing it (deplokit.compile from Python captures shapes only)")
        if self.shapes_only and any(isinstance(a, torch.Tensor) and a.is_meta
                                    for a in tree_flatten((args, kwargs))[0]):
            if shapes is None:
                raise NeedsValues(func.__name__)
            return shapes
        return func(*args, **kwargs)


def size_guard(shapes_only: bool = False) -> _SizeGuard:
    return _SizeGuard(shapes_only)
