"""015 pipeline_k_outer: rotate the K-outer loop into prologue/steady-state/epilogue (cp.async + TMA).

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "rotate the K-outer loop into prologue/steady-state/epilogue (cp.async + TMA)"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
