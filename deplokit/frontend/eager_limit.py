"""A bound on what `-c` text may compute eagerly: the text runs once for real (its inputs and
constants are real tensors), so an output of billions of elements would be allocated before
capture, which itself needs only shapes. Each op's output shape is worked out first on the meta
device (no memory); an op whose outputs exceed MAX_EAGER_ELEMENTS is refused with a clear
error instead of filling the machine's memory."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ..errors import ExpressionError

MAX_EAGER_ELEMENTS = 2 ** 27        # 512 MiB of float32


def _to_meta(a):
    return a.to("meta") if isinstance(a, torch.Tensor) else a


class EagerSizeLimit(TorchDispatchMode):
    """Refuse an op (not a view: views allocate nothing) whose outputs exceed the bound."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # random ops are not pre-run: the meta run would advance the seeded generator
        if not getattr(func, "is_view", False) and torch.Tag.nondeterministic_seeded not in func.tags:
            try:
                outs = func(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs))
            except Exception:     # no meta kernel: nothing to learn, run it for real
                outs = None
            n = sum(t.numel() for t in tree_leaves(outs) if isinstance(t, torch.Tensor))
            if n > MAX_EAGER_ELEMENTS:
                shapes = ", ".join(str(tuple(t.shape)) for t in tree_leaves(outs) if isinstance(t, torch.Tensor))
                raise ExpressionError(
                    f"evaluating the text eagerly would compute {func.__name__.split('.')[0]} of shape {shapes} "
                    f"({n} elements, over the {MAX_EAGER_ELEMENTS} deplokit evaluates for -c); "
                    "write the program as a Python file (deplokit compile FILE.py), which is captured "
                    "from shapes alone")
        return func(*args, **kwargs)
