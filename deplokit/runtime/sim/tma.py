"""The simulator's TMA copies and mbarriers (an advanced feature: passes/tma/): the Kernel-IR
statements of ir/kernel_tma.py (TmaLoad, TmaTensorLoad, MbarrierInit, MbarrierArrive,
MbarrierWait and ProxyFence), each run by a function taking the chunk (sim/exec.py's Chunk,
whose FEATURE_STATEMENTS table merges this module's STATEMENTS) as its first argument; the
chunk asks `watches_proxy` whether to track ordinary stores for the proxy-fence check
(`note_generic` records them), and `mbar_name` what a copy in flight waits on. A copy
lands at once and is marked in flight in the shared array's table until a wait observes
the phase its bytes complete.

Every mbarrier (each slot of an array) has an id; a TMA copy in flight marks the shared
elements it wrote with the tag -(1 + id + MBAR_IDS * phase), the phase of that barrier
its bytes complete, and a wait that observes that phase clears the mark for its block.
A phase completes when `count` arrivals were made and every announced transaction
byte landed (copies land when issued: the data is written at once, marked in flight).
try_wait.parity P passes when the barrier's last completed phase has parity P (a fresh
barrier counts parity 1 as done); otherwise the phase would have to complete while the
block waits, which in the simulator's lockstep execution nobody can make happen:
a deadlock (a missing arrive, missing bytes, or a wait for the wrong phase)."""
from __future__ import annotations

import numpy as np

from ...ir.kernel_ir import walk_stmts
from ...ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait, ProxyFence, TmaLoad, TmaTensorLoad
from ...ir.swizzle import REPEAT, swizzle_bytes, swizzle_word
from ..tensor_map import box_values
from .memory import MBarState
from .values import F32, I64, cast

MBAR_IDS = 1024                 # mbarriers (slots) a kernel may have: the in-flight tag's radix


def start(chunk):
    """The chunk's mbarriers (by name) and, per thread, the latest release tick it waited for."""
    chunk.mbars = {}
    chunk.acquired = None         # (blocks, threads), made at the first wait that acquires


def watches_proxy(k) -> bool:
    """Whether kernel k has async-proxy copies (TmaLoad) that ordinary stores to their shared
    memory must be fenced before: the chunk then notes those stores (note_generic)."""
    return any(isinstance(s, TmaLoad) for s in walk_stmts(k.body))


def note_generic(chunk, sh, keys, tids, n):
    """Ordinary stores at flat keys (+0..n-1) by threads tids: not yet proxy-fenced (the chunk
    calls it on each shared store of a kernel that `watches_proxy`)."""
    if sh.gw is None:
        sh.gw = np.full((chunk.nb, sh.size), -1, dtype=np.int32)
    gwf = sh.gw.reshape(-1)
    for j in range(n):
        gwf[keys + j] = tids


def one_issuer(chunk, rows, what):
    per_block = np.bincount(rows, minlength=chunk.nb)
    if per_block.max() > 1:
        r = int(np.argmax(per_block))
        chunk.fail(f"{what} issued by {int(per_block[r])} threads of block "
                   f"{chunk.block_index(r)}; a TMA copy is issued by one thread")


def exec_tma_load(chunk, s: TmaLoad, mask):
    mb = mbar(chunk, s.barrier, "TmaLoad")
    rows, tids, sl = mbar_threads(chunk, mb, s.slot, mask, "TmaLoad")
    if rows.size == 0:
        return
    one_issuer(chunk, rows, f"TmaLoad into {s.array}")
    c = int(s.count)
    if c <= 0 or c % 4:
        chunk.fail(f"TmaLoad of {c} floats: the size must be a positive multiple of 16 bytes")
    buf = chunk.gbuf(s.buffer, "TmaLoad")
    sh = chunk.sarr(s.array, "TmaLoad")
    src = chunk.check_bounds(chunk.ev_int(s.src_offset, mask), c, buf.size, mask,
                             f"buffer {s.buffer}", "TmaLoad", align=4)
    dst = chunk.check_bounds(chunk.ev_int(s.dst_offset, mask), c, sh.size, mask,
                             f"shared array {sh.name}", "TmaLoad", align=4)
    src = np.broadcast_to(src, chunk.shape)[rows, tids]
    dst = np.broadcast_to(dst, chunk.shape)[rows, tids]
    span = np.arange(c, dtype=I64)
    keys = (rows * sh.size + dst)[:, None] + span
    land(chunk, sh, "TmaLoad", s.expect, mb, rows, tids, sl, keys, cast(buf[src[:, None] + span], F32), s.buffer)


def exec_tma_tensor_load(chunk, s: TmaTensorLoad, mask):
    """The box of the tensor map at the issuing thread's coordinates, elements outside the
    tensor zero, written row-major and swizzled as the map says (where the bytes land:
    a read with another XOR reads other elements)."""
    mb = mbar(chunk, s.barrier, "TmaTensorLoad")
    try:
        tmap = chunk.k.tensor_map(s.tensor_map)
    except KeyError:
        chunk.fail(f"TmaTensorLoad through {s.tensor_map!r}, which is no tensor map of the kernel")
    if len(s.coords) != len(tmap.box) or len(tmap.box) != len(tmap.shape):
        chunk.fail(f"TmaTensorLoad through {tmap.name}: {len(s.coords)} coordinates for a box of rank "
                   f"{len(tmap.box)} over a tensor of rank {len(tmap.shape)}")
    rows, tids, sl = mbar_threads(chunk, mb, s.slot, mask, "TmaTensorLoad")
    if rows.size == 0:
        return
    one_issuer(chunk, rows, f"TmaTensorLoad into {s.array}")
    buf = chunk.gbuf(tmap.buffer, "TmaTensorLoad")
    if buf.size != int(np.prod(tmap.shape)):
        chunk.fail(
            f"tensor map {tmap.name} describes {tmap.buffer} as {tmap.shape}, but it holds {buf.size} elements"
        )
    sh = chunk.sarr(s.array, "TmaTensorLoad")
    size = tmap.element_bytes
    if sh.elem_bytes != size:
        chunk.fail(f"TmaTensorLoad of {size}-byte elements through {tmap.name} into {sh.name}, "
                   f"which holds {sh.elem_bytes}-byte ones")
    n = tmap.box_bytes // size
    line = max(128, REPEAT[tmap.swizzle])          # where a box (and its swizzle pattern) may start
    dst = chunk.check_bounds(chunk.ev_int(s.dst_offset, mask), n, sh.size, mask,
                             f"shared array {sh.name}", "TmaTensorLoad", align=line // size)
    dst = np.broadcast_to(dst, chunk.shape)[rows, tids]
    origins = np.stack([np.broadcast_to(chunk.ev_int(c, mask), chunk.shape)[rows, tids] for c in s.coords], axis=1)
    values = cast(box_values(buf, tmap.shape, tmap.box, origins), F32)
    if size == 4:
        lands = swizzle_word(np.arange(n, dtype=I64), tmap.swizzle)
    else:                                          # halves: the byte pattern, element by element
        lands = swizzle_bytes(np.arange(n, dtype=I64) * size, tmap.swizzle) // size
    keys = (rows * sh.size + dst)[:, None] + lands
    land(chunk, sh, "TmaTensorLoad", s.expect, mb, rows, tids, sl, keys, values, tmap.buffer)


def land(chunk, sh, kind, expect, mb, rows, tids, sl, keys, values, buffer: str):
    """A TMA copy's `values` written at shared `keys` (one row per issuing thread), in
    flight on mb[sl] until a wait observes the phase its bytes complete, after the
    pending-copy and race checks; `expect`: the copy announces its own bytes."""
    issuer = np.broadcast_to(tids.astype(np.int32)[:, None], keys.shape)
    if sh.has_pending and (sh.pend.reshape(-1)[keys] != 0).any():
        chunk.fail(f"{kind} into shared array {sh.name} overwrites an async copy still in flight")
    if chunk.check:
        lanes = np.broadcast_to((rows * chunk.T + tids)[:, None], keys.shape).reshape(-1)
        if sh.dirty:
            w = sh.lw.reshape(-1)[keys].reshape(-1)
            bad = (w >= 0) & (w != issuer.reshape(-1))
            if bad.any():
                chunk.race_flat(sh, kind, keys.reshape(-1), lanes, w, bad, "already written")
        chunk.fold_reads(sh)
        if sh.lr_dirty:
            check_slot_released(chunk, sh, keys, rows, tids, issuer)
    check_proxy_fenced(chunk, sh, keys, rows, tids)
    nbytes = sh.elem_bytes * keys.shape[1]
    if expect:                    # the issuer's own arrive.expect_tx, then its bytes land
        mbar_arrive(chunk, mb, rows, tids, sl, nbytes)
    sh.flat[keys] = values
    tags = -(1 + mb.id + sl + MBAR_IDS * mb.phase[rows, sl])
    if sh.pend is None:
        sh.pend = np.zeros((chunk.nb, sh.size), dtype=np.int32)
    sh.pend.reshape(-1)[keys] = np.broadcast_to(tags[:, None], keys.shape).astype(np.int32)
    sh.has_pending = True
    np.add.at(mb.tx, (rows, sl), -nbytes)          # complete_tx: the copy's bytes landed
    mbar_complete(chunk, mb, rows, sl)
    chunk.stats.load(buffer, keys.size * sh.elem_bytes, 0)
    chunk.stats.shared_bytes_stored += keys.size * sh.elem_bytes


def exec_proxy_fence(chunk, s, mask):
    act = np.ones(chunk.shape, dtype=bool) if mask is None else np.broadcast_to(mask, chunk.shape)
    for sh in chunk.shared.values():
        if sh.gw is not None:
            rows = np.arange(chunk.nb)[:, None]
            sh.gw[(sh.gw >= 0) & act[rows, np.maximum(sh.gw, 0)]] = -1


def check_proxy_fenced(chunk, sh, keys, rows, tids):
    """An async-proxy copy may not meet ordinary stores to its shared memory that their
    threads did not order before it with fence.proxy.async."""
    if sh.gw is None:
        return
    w = sh.gw.reshape(-1)[keys]
    if (w >= 0).any():
        i, j = (int(x[0]) for x in np.nonzero(w >= 0))
        chunk.fail(f"TmaLoad (async proxy) into element {int(keys[i, j]) % sh.size} of shared array {sh.name} "
                   f"in block {chunk.block_index(int(rows[i]))}, which thread {chunk.thread_index(int(w[i, j]))} "
                   f"wrote with an ordinary store not followed by fence.proxy.async (ProxyFence)")


def check_slot_released(chunk, sh, keys, rows, tids, issuer):
    """A copy may overwrite what other threads read only once their reads are ordered
    before it: by a Barrier (which clears the read table) or by an mbarrier phase every
    thread arrived on after reading (a ring's empty barrier) that the issuer waited for."""
    r_ = sh.lr.reshape(-1)[keys]
    bad = (r_ == -2) | ((r_ >= 0) & (r_ != issuer))
    if not bad.any():
        return
    got = np.full(rows.size, -1, dtype=I64) if chunk.acquired is None else chunk.acquired[rows, tids]
    bad &= sh.rt.reshape(-1)[keys] > got[:, None]
    if bad.any():
        i, j = (int(x[0]) for x in np.nonzero(bad))
        w = int(r_[i, j])
        who = "several threads" if w == -2 else f"thread {chunk.thread_index(w)}"
        chunk.fail(f"TMA copy by thread {chunk.thread_index(int(tids[i]))} of block "
                   f"{chunk.block_index(int(rows[i]))} overwrites element {int(keys[i, j]) % sh.size} of "
                   f"shared array {sh.name}, read by {who} and not yet released: the slot is still "
                   f"being read (wait for its empty mbarrier's phase, or a Barrier, before refilling it)")


def mbar_name(chunk, tag_value):
    ident = tag_value % MBAR_IDS
    for name, mb in chunk.mbars.items():
        if mb.id <= ident < mb.id + mb.slots:
            return name if mb.slots == 1 else f"{name}[{ident - mb.id}]"
    return f"#{ident}"


def exec_mbarrier_init(chunk, s: MbarrierInit, mask):
    mb = chunk.mbars.get(s.name)
    if mb is None:
        base = sum(m.slots for m in chunk.mbars.values())
        if base + s.slots > MBAR_IDS:
            chunk.fail(f"more than {MBAR_IDS} mbarriers in one kernel")
        chunk.mbars[s.name] = MBarState(base, s.name, int(s.count), int(s.slots), chunk.nb, chunk.T)
        return
    if mb.slots != s.slots or mb.count != s.count:
        chunk.fail(f"mbarrier {s.name} initialised twice with different counts or slots")
    rows = block_rows(chunk, mask)
    for table, v in ((mb.phase, 0), (mb.arrived, 0), (mb.tx, 0), (mb.first, -1), (mb.released, -1)):
        table[rows] = v
    mb.who[rows] = False


def block_rows(chunk, mask):
    if mask is None:
        return np.ones(chunk.nb, dtype=bool)
    return np.broadcast_to(np.broadcast_to(mask, (mask.shape[0], chunk.T)).any(axis=1), (chunk.nb,))


def mbar(chunk, name, kind) -> MBarState:
    mb = chunk.mbars.get(name)
    if mb is None:
        chunk.fail(f"{kind} on mbarrier {name!r}, which is not initialised (MbarrierInit)")
    return mb


def mbar_threads(chunk, mb: MBarState, slot, mask, kind):
    """(rows, thread ids, slots) of the active threads for a statement on mb[slot]."""
    act = np.ones(chunk.shape, dtype=bool) if mask is None else np.broadcast_to(mask, chunk.shape)
    rows, tids = np.nonzero(act)
    if slot is None:
        return rows, tids, np.zeros(rows.size, dtype=I64)
    sl = np.broadcast_to(chunk.ev_int(slot, mask), chunk.shape)[rows, tids].astype(I64)
    bad = (sl < 0) | (sl >= mb.slots)
    if bad.any():
        chunk.fail(f"{kind} on mbarrier {mb.name}[{int(sl[bad][0])}], which has {mb.slots} slots "
                   f"(thread {chunk.thread_index(int(tids[bad][0]))} of block "
                   f"{chunk.block_index(int(rows[bad][0]))})")
    return rows, tids, sl


def mbar_arrive(chunk, mb: MBarState, rows, tids, sl, expect_tx=0):
    chunk.tick += 1
    np.add.at(mb.arrived, (rows, sl), 1)
    if expect_tx:
        np.add.at(mb.tx, (rows, sl), int(expect_tx))
    mb.who[rows, sl, tids] = True
    first = mb.first[rows, sl]
    mb.first[rows, sl] = np.where(first < 0, chunk.tick, first)
    mbar_complete(chunk, mb, rows, sl)


def mbar_complete(chunk, mb: MBarState, rows, sl):
    """Complete the current phase of every touched mb[slot] whose arrivals and bytes are in."""
    done = (mb.arrived[rows, sl] >= mb.count) & (mb.tx[rows, sl] == 0)
    if not done.any():
        return
    r, q = rows[done], sl[done]
    # every thread the barrier counts arrived (all of the block's, or a warp-specialised
    # kernel's consumers): the reads they made before are released to whoever waits on it
    every = mb.who[r, q].sum(axis=-1) >= min(mb.count, mb.who.shape[-1])
    mb.released[r, q] = np.where(every, mb.first[r, q], -1)
    mb.phase[r, q] += 1
    mb.arrived[r, q] = 0
    mb.who[r, q] = False
    mb.first[r, q] = -1


def exec_mbarrier_arrive(chunk, s: MbarrierArrive, mask):
    mb = mbar(chunk, s.name, "MbarrierArrive")
    rows, tids, sl = mbar_threads(chunk, mb, s.slot, mask, "MbarrierArrive")
    if rows.size:
        mbar_arrive(chunk, mb, rows, tids, sl, s.expect_tx)
        if getattr(chunk, "roles", None) is not None:     # a blocked role may go on now
            chunk.roles.arrived()


def exec_mbarrier_wait(chunk, s: MbarrierWait, mask):
    mb = mbar(chunk, s.name, "MbarrierWait")
    rows, tids, sl = mbar_threads(chunk, mb, s.slot, mask, "MbarrierWait")
    if rows.size == 0:
        return
    want = np.broadcast_to(chunk.ev_int(s.phase, mask), chunk.shape)[rows, tids].astype(I64) & 1
    c = mb.phase[rows, sl]
    ok = np.where(c >= 1, ((c - 1) & 1) == want, want == 1)
    roles = getattr(chunk, "roles", None)       # a warp-specialised split: the other role may arrive
    while not ok.all() and roles is not None and roles.yield_blocked():
        c = mb.phase[rows, sl]
        ok = np.where(c >= 1, ((c - 1) & 1) == want, want == 1)
    if not ok.all():
        i = int(np.nonzero(~ok)[0][0])
        r, q = int(rows[i]), int(sl[i])
        name = s.name if mb.slots == 1 else f"{s.name}[{q}]"
        chunk.fail(f"MbarrierWait on {name} waits for phase parity {int(want[i])} but block "
                   f"{chunk.block_index(r)} is in phase {int(c[i])} ({int(mb.arrived[r, q])} of {mb.count} "
                   f"arrivals, {int(mb.tx[r, q])} transaction bytes outstanding), which never completes "
                   f"while the block waits: a missing arrive or copy, or a wait for the wrong phase "
                   f"(stale or deadlocking wait)")
    # the wait observes phase c - 1: its copies are visible to the waiters' blocks, and
    # the reads released by its arrivals are ordered before the waiters' next accesses
    seen = np.full(chunk.nb, -1, dtype=I64)
    ident = np.full(chunk.nb, -1, dtype=I64)
    seen[rows] = c - 1
    ident[rows] = mb.id + sl
    for sh in chunk.shared.values():
        if sh.has_pending:
            v = -sh.pend.astype(I64) - 1
            hit = (sh.pend < 0) & (v % MBAR_IDS == ident[:, None]) & (v // MBAR_IDS <= seen[:, None])
            if hit.any():
                sh.pend[hit] = 0
                if sh.lw is not None:     # completed TMA data is visible to every waiter
                    sh.lw[hit] = -1
                sh.has_pending = bool(sh.pend.any())
    if chunk.acquired is None:
        chunk.acquired = np.full((chunk.nb, chunk.T), -1, dtype=I64)
    np.maximum.at(chunk.acquired, (rows, tids), mb.released[rows, sl])


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {
    TmaLoad: exec_tma_load, TmaTensorLoad: exec_tma_tensor_load, MbarrierInit: exec_mbarrier_init,
    MbarrierArrive: exec_mbarrier_arrive, MbarrierWait: exec_mbarrier_wait, ProxyFence: exec_proxy_fence,
}
