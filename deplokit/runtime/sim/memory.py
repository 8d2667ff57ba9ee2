"""Storage of one chunk of blocks: per-thread register arrays, shared arrays with their race
tables and async-copy marks, and mbarriers. The operations on them are the Chunk's
(exec.py)."""
from __future__ import annotations

import numpy as np

from ...ir.types import ctype_bytes
from .values import F32, I64


class RegArray:
    """A per-thread register array, stored as (size, blocks, threads)."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class SharedState:
    __slots__ = ("name", "size", "data", "flat", "lw", "dirty", "lr", "lr_dirty", "reads", "rt",
                 "pend", "has_pending", "scratch", "gw", "ctype", "elem_bytes")

    def __init__(self, name, size, nb, dtype=F32, ctype="float"):
        self.name, self.size = name, size
        # a half array holds its values in float32 (exact), but its elements are 2 bytes:
        # ldmatrix rows, cp.async sizes and the bank model count bytes
        self.ctype, self.elem_bytes = ctype, ctype_bytes(ctype)
        # garbage until written: NaN, or for integers a value no kernel computes by chance
        self.data = np.full((nb, size), np.nan if dtype == F32 else -0x5EED, dtype=dtype)
        self.flat = self.data.reshape(-1)
        self.lw = None          # (nb, size) int32 last writer since the last barrier, -1 none
        self.dirty = False      # any write since the last barrier
        self.lr = None          # (nb, size) int32 reader since the last barrier, -2 several
        self.lr_dirty = False
        self.reads = []         # logged reads not yet folded into lr: (offset, mask, n, tick)
        self.rt = None          # (nb, size) int64 tick of the last read (ring slot releases)
        self.pend = None        # (nb, size) int32: >0 cp.async group, <0 -(mbarrier id + 1)
        self.has_pending = False
        self.scratch = None     # (nb * size,) int64: duplicate-address detection
        self.gw = None          # (nb, size) int32 thread of an ordinary store not yet proxy-fenced, -1 none


class MBarState:
    """`slots` mbarriers per block (an array name[slots], or one): per (block, slot) the phases
    completed so far, the arrivals and the transaction bytes the current phase still waits
    for, which threads arrived, and when the last completed phase was released (the tick
    of its first arrival when every thread of the block arrived in it, else -1: reads made
    before that tick by any thread are ordered before whoever waits on the phase)."""
    __slots__ = ("id", "name", "count", "slots", "phase", "arrived", "tx", "who", "first", "released")

    def __init__(self, ident, name, count, slots, nb, threads):
        self.id, self.name, self.count, self.slots = ident, name, count, slots
        self.phase = np.zeros((nb, slots), dtype=I64)     # completed phases
        self.arrived = np.zeros((nb, slots), dtype=I64)   # arrivals in the current phase
        self.tx = np.zeros((nb, slots), dtype=I64)        # transaction bytes still to land
        self.who = np.zeros((nb, slots, threads), dtype=bool)
        self.first = np.full((nb, slots), -1, dtype=I64)
        self.released = np.full((nb, slots), -1, dtype=I64)
