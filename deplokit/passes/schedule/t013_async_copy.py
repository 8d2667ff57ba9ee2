"""013 async_copy: narrow the rest to AsyncBufferedStage (cp.async, sm_80+).

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "narrow the rest to AsyncBufferedStage (cp.async, sm_80+)"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
