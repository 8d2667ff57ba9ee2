"""003 split_matmul_k: promote the K-outer chunk loop into a grid dimension.

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "promote the K-outer chunk loop into a grid dimension"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
