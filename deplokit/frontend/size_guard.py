"""Refuse, before computing it, an eager result too large to compile.

`-c` text (and a model file) is evaluated eagerly once to find the inputs and the output;
`x.expand(2**16, 2**15) * 2` would allocate 8.6 GB there before capture could refuse it.
Under `size_guard()` every torch op is first run on meta tensors (shapes only); an op
whose result would have 2**31 elements or more raises ExpressionError (deplokit.compile,
which captures shapes only, compiles such programs: their kernels index in 64 bits).
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import ExpressionError

MAX_ELEMENTS = 2**31 - 1     # 8 GiB of float32: more than an eager evaluation should allocate


def _meta(x):
    return x.to("meta") if isinstance(x, torch.Tensor) and not x.is_meta else x


class _SizeGuard(TorchDispatchMode):
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
        return func(*args, **kwargs)


def size_guard() -> _SizeGuard:
    return _SizeGuard()
