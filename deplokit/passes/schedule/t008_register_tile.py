"""008 register_tile: replicate the inner tile so each thread owns a register block.

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "replicate the inner tile so each thread owns a register block"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
