"""014 pad_smem: pad shared-memory strides to break bank conflicts.

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "pad shared-memory strides to break bank conflicts"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
