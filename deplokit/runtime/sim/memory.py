"""Storage of one chunk of blocks: per-thread register arrays, shared arrays with their race
tables and async-copy marks, and mbarriers. The operations on them live in the _Chunk mixins
(shared.py, async_copy.py) and in exec.py (register arrays)."""
from __future__ import annotations

import numpy as np

from .values import F32, I64


class _Reg:
    """A per-thread register array, stored as (size, blocks, threads)."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class _Shared:
    __slots__ = ("name", "size", "data", "flat", "lw", "dirty", "lr", "lr_dirty", "reads",
                 "pend", "has_pending", "scratch")

    def __init__(self, name, size, nb, dtype=F32):
        self.name, self.size = name, size
        # garbage until written: NaN, or for integers a value no kernel computes by chance
        self.data = np.full((nb, size), np.nan if dtype == F32 else -0x5EED, dtype=dtype)
        self.flat = self.data.reshape(-1)
        self.lw = None          # (nb, size) int32 last writer since the last barrier, -1 none
        self.dirty = False      # any write since the last barrier
        self.lr = None          # (nb, size) int32 reader since the last barrier, -2 several
        self.lr_dirty = False
        self.reads = []         # logged reads not yet folded into lr: (offset, mask, n)
        self.pend = None        # (nb, size) int32: >0 cp.async group, <0 -(mbarrier id + 1)
        self.has_pending = False
        self.scratch = None     # (nb * size,) int64: duplicate-address detection


class _MBar:
    __slots__ = ("id", "count", "phase", "inflight")

    def __init__(self, ident, count, nb):
        self.id, self.count = ident, count
        self.phase = np.zeros(nb, dtype=I64)
        self.inflight = np.zeros(nb, dtype=bool)
