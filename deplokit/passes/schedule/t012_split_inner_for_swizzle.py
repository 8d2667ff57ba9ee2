"""012 split_inner_for_swizzle: split the inner cache axis of a TmaBufferedStage for swizzle.

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "split the inner cache axis of a TmaBufferedStage for swizzle"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
