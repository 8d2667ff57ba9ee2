"""010 double_buffer: promote K-outer Stages to BufferedStage (ping-pong).

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "promote K-outer Stages to BufferedStage (ping-pong)"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
