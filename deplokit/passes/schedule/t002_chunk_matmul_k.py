"""002 chunk_matmul_k: chunk the K reduce into K-outer x K-inner (intra-CTA).

Not built yet: this version of deplokit schedules matmul kernels without it, and the
pass records that it did not apply."""
from __future__ import annotations

from .knobs import Skip

DESCRIPTION = "chunk the K reduce into K-outer x K-inner (intra-CTA)"


def apply(kernel, target, knobs):
    return Skip("not implemented yet in this version of deplokit")
