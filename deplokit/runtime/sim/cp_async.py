"""The simulator's cp.async copies (an advanced feature: 013 async_copy, passes/lower/cuda_cp_async.py): the
Kernel-IR statements of ir/kernel_cp_async.py, each run by a function taking the chunk
(sim/exec.py's Chunk, whose FEATURE_STATEMENTS table merges this module's STATEMENTS) as its
first argument. A copy lands at once and is marked in flight in the shared array's table
(the chunk's shared_write, tagged with the block's open group, chunk.cp_open) until a
wait_group leaves its group no longer pending; a read of it before then fails.

cp.async groups are counted per block: a block whose key loop runs fewer iterations (a
causal ring's guarded prologue) commits and waits on its own count, so a group it fails to
commit leaves its copies in flight where wait_group lets them be."""
from __future__ import annotations

import numpy as np

from ...ir.kernel_cp_async import CpAsync, CpAsyncCommit, CpAsyncWait
from .values import F32, cast


def start(chunk):
    """The chunk's cp.async groups, per block: the one being filled and the last committed."""
    chunk.cp_open = np.ones(chunk.nb, dtype=np.int32)          # id of the cp.async group being filled
    chunk.cp_committed = np.zeros(chunk.nb, dtype=np.int32)    # groups 1..cp_committed are committed


def exec_cp_async(chunk, s: CpAsync, mask):
    if s.nbytes not in (4, 8, 16):
        chunk.fail(f"cp.async of {s.nbytes} bytes (must be 4, 8 or 16)")
    buf = chunk.gbuf(s.buffer, "CpAsync")
    sh = chunk.sarr(s.array, "CpAsync")
    width = chunk.elem_bytes(s.buffer, buf)
    if width != sh.elem_bytes or s.nbytes % width:
        chunk.fail(f"cp.async of {s.nbytes} bytes from {s.buffer} ({width}-byte elements) into "
                   f"{s.array} ({sh.elem_bytes}-byte elements)")
    n = s.nbytes // width
    src = chunk.check_bounds(chunk.ev_int(s.src_offset, mask), n, buf.size, mask,
                             f"buffer {s.buffer}", "CpAsync", align=n)
    vals = [cast(np.take(buf, src + j), F32) for j in range(n)]
    chunk.stats.load(s.buffer, chunk.count(mask) * s.nbytes, chunk.count(mask))
    chunk.shared_write(sh, chunk.ev_int(s.dst_offset, mask), vals, mask, "CpAsync", align=n,
                       pend_tag=chunk.cp_open)


def whole_blocks(chunk, mask, what):
    """The blocks whose threads all run `what` (a commit or a wait); a block only some of
    whose threads run it fails: its groups would differ thread by thread."""
    if mask is None:
        return np.ones(chunk.nb, dtype=bool)
    act = np.broadcast_to(mask, chunk.shape)
    some, every = act.any(axis=1), act.all(axis=1)
    if (some & ~every).any():
        r = int(np.nonzero(some & ~every)[0][0])
        chunk.fail(f"{what} run by some threads of block {chunk.block_index(r)} only: a cp.async group "
                   f"count that differs between the threads of a block is not simulated")
    return every


def exec_cp_commit(chunk, s: CpAsyncCommit, mask):
    rows = whole_blocks(chunk, mask, "cp.async.commit_group")
    chunk.cp_committed[rows] = chunk.cp_open[rows]
    chunk.cp_open[rows] += 1


def exec_cp_wait(chunk, s: CpAsyncWait, mask):
    rows = whole_blocks(chunk, mask, "cp.async.wait_group")
    done = np.where(rows, chunk.cp_committed - int(s.pending), 0)[:, None]
    for sh in chunk.shared.values():
        if sh.has_pending:
            p = sh.pend
            p[(p > 0) & (p <= done)] = 0
            sh.has_pending = bool(p.any())


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {CpAsync: exec_cp_async, CpAsyncCommit: exec_cp_commit, CpAsyncWait: exec_cp_wait}
