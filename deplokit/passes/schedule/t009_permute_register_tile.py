"""009 permute_register_tile: reorder the register strip so bank-conflicting loads land on far columns.

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "reorder the register strip so bank-conflicting loads land on far columns"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
