"""The Kernel-IR backends (the simulator, CUDA) compute integer arithmetic in float32 registers,
exact only for magnitudes up to 2**24. Rather than return a silently wrong number, a run whose
integer inputs or outputs leave that range is refused; the tensor and loop backends compute
integers exactly at their width."""
from __future__ import annotations

import numpy as np

from ..errors import ExecutionError

FLOAT_EXACT_INT = 2 ** 24


def refuse_inexact_integers(values, backend: str, what: str) -> None:
    """values: (name, array) pairs; raise ExecutionError when an integer one leaves +-2**24."""
    for name, v in values:
        a = np.asarray(v)
        if a.size and np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_:
            big = int(np.abs(a.astype(np.int64)).max())
            if big > FLOAT_EXACT_INT:
                raise ExecutionError(
                    f"{what} {name} holds the integer {big}, beyond 2**24 = {FLOAT_EXACT_INT}: the "
                    f"{backend} backend computes integers in float32, exact only up to 2**24, so "
                    "deplokit refuses rather than return a wrong number (the tensor and loop "
                    "backends compute integers exactly)")
