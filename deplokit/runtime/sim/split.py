"""The simulator's in-kernel split-K tail (an advanced feature: passes/split/split_tail.py):
the Kernel-IR statements ThreadFence, AtomicInc and Broadcast, each run by a function taking
the chunk (sim/exec.py's Chunk, whose FEATURE_STATEMENTS table merges this module's
STATEMENTS) as its first argument."""
from __future__ import annotations

import numpy as np

from ...ir.kernel_split import AtomicInc, Broadcast, ThreadFence
from .values import I64, cast, dtype_of, owned


def exec_thread_fence(chunk, s: ThreadFence, mask):
    """Nothing to do: a store is visible to every block at once."""


def exec_atomic_inc(chunk, s: AtomicInc, mask):
    """atomicAdd(&buffer[offset], 1) by every active lane, one after another in the order
    the blocks arrive (lane order, or the chunk's blocks last to first when `reverse`);
    each lane's `dst` is the count before its own increment."""
    buf = chunk.gbuf(s.buffer, "AtomicInc")
    if chunk.params[s.buffer].const:
        chunk.fail(f"AtomicInc on read-only parameter {s.buffer}")
    off = chunk.check_bounds(chunk.ev_int(s.offset, mask), 1, buf.size, mask, f"buffer {s.buffer}", "AtomicInc")
    live = np.ones(chunk.shape, dtype=bool) if mask is None else np.broadcast_to(mask, chunk.shape)
    offs = np.broadcast_to(off, chunk.shape)
    old = np.zeros(chunk.shape, dtype=I64)
    rows = range(chunk.nb - 1, -1, -1) if chunk.reverse else range(chunk.nb)
    for r in rows:
        for t in np.nonzero(live[r])[0]:
            o = int(offs[r, t])
            old[r, t] = int(buf[o])
            buf[o] += 1
    chunk.stats.global_loads += int(live.sum())
    chunk.scopes[-1][s.dst] = [dtype_of("int"), old]


def exec_broadcast(chunk, s: Broadcast, mask):
    sh = chunk.sarr(s.array, "Broadcast")
    value = chunk.shared_read(sh, np.zeros((1, 1), dtype=I64), 1, mask, "Broadcast")[0]
    chunk.scopes[-1][s.dst] = [dtype_of("int"), owned(cast(np.asarray(value), dtype_of("int")))]


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {
    ThreadFence: exec_thread_fence, AtomicInc: exec_atomic_inc, Broadcast: exec_broadcast,
}
