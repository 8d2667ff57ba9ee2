"""Asynchronous copies into shared memory: cp.async with its commit groups and waits, and TMA
copies (1-D bulk runs; tensor-map boxes with zero fill and swizzle) completing on mbarriers: arrivals, expected transaction bytes, phases and their
parity waits, and the ring protocol's checks (a deadlocking wait, a missing arrive, a read
of a slot whose copy has not completed, a copy overwriting a slot still being read). A mixin of _Chunk
(exec.py); the data lands immediately and is marked in flight in the shared array's table."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ...ir.swizzle import REPEAT, swizzle_word
from ..tensor_map import box_values
from .memory import _MBar

MBAR_IDS = 1024                 # mbarriers (slots) a kernel may have: the in-flight tag's radix
from .values import F32, I64, _cast


class _AsyncCopies:
    """cp.async and TMA / mbarrier statements of _Chunk."""

    def s_cp_async(self, s: K.CpAsync, mask):
        if s.nbytes not in (4, 8, 16):
            self.fail(f"cp.async of {s.nbytes} bytes (must be 4, 8 or 16)")
        n = s.nbytes // 4
        buf = self.gbuf(s.buffer, "CpAsync")
        src = self.check_bounds(self.ev_int(s.src_offset, mask), n, buf.size, mask,
                                f"buffer {s.buffer}", "CpAsync", align=n)
        vals = [_cast(np.take(buf, src + j), F32) for j in range(n)]
        self.stats.global_bytes_loaded += self.count(mask) * 4 * n
        self.stats.global_loads += self.count(mask)
        sh = self.sarr(s.array, "CpAsync")
        self.shared_write(sh, self.ev_int(s.dst_offset, mask), vals, mask, "CpAsync", align=n,
                          pend_tag=self.cp_open)

    def mark_pending(self, sh, keys, n, tag):
        """Flat shared keys (+0..n-1) in flight in cp.async group tag[block] of their block."""
        if sh.pend is None:
            sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
        pf = sh.pend.reshape(-1)
        for j in range(n):
            pf[keys + j] = tag[(keys + j) // sh.size]
        sh.has_pending = True

    # cp.async groups are counted per block: a block whose key loop runs fewer iterations
    # (a causal ring's guarded prologue) commits and waits on its own count, so a group it
    # fails to commit leaves its copies in flight where wait_group lets them be

    def whole_blocks(self, mask, what):
        """The blocks whose threads all run `what` (a commit or a wait); a block only some of
        whose threads run it fails: its groups would differ thread by thread."""
        if mask is None:
            return np.ones(self.nb, dtype=bool)
        act = np.broadcast_to(mask, self.shape)
        some, every = act.any(axis=1), act.all(axis=1)
        if (some & ~every).any():
            r = int(np.nonzero(some & ~every)[0][0])
            self.fail(f"{what} run by some threads of block {self.block_index(r)} only: a cp.async group "
                      f"count that differs between the threads of a block is not simulated")
        return every

    def s_cp_commit(self, s, mask):
        rows = self.whole_blocks(mask, "cp.async.commit_group")
        self.cp_committed[rows] = self.cp_open[rows]
        self.cp_open[rows] += 1

    def s_cp_wait(self, s: K.CpAsyncWait, mask):
        rows = self.whole_blocks(mask, "cp.async.wait_group")
        done = np.where(rows, self.cp_committed - int(s.pending), 0)[:, None]
        for sh in self.shared.values():
            if sh.has_pending:
                p = sh.pend
                p[(p > 0) & (p <= done)] = 0
                sh.has_pending = bool(p.any())

    def _one_issuer(self, rows, what):
        per_block = np.bincount(rows, minlength=self.nb)
        if per_block.max() > 1:
            r = int(np.argmax(per_block))
            self.fail(f"{what} issued by {int(per_block[r])} threads of block "
                      f"{self.block_index(r)}; a TMA copy is issued by one thread")

    def s_tma_load(self, s: K.TmaLoad, mask):
        mb = self.mbar(s.barrier, "TmaLoad")
        rows, tids, sl = self.mbar_threads(mb, s.slot, mask, "TmaLoad")
        if rows.size == 0:
            return
        self._one_issuer(rows, f"TmaLoad into {s.array}")
        c = int(s.count)
        if c <= 0 or c % 4:
            self.fail(f"TmaLoad of {c} floats: the size must be a positive multiple of 16 bytes")
        buf = self.gbuf(s.buffer, "TmaLoad")
        sh = self.sarr(s.array, "TmaLoad")
        src = self.check_bounds(self.ev_int(s.src_offset, mask), c, buf.size, mask,
                                f"buffer {s.buffer}", "TmaLoad", align=4)
        dst = self.check_bounds(self.ev_int(s.dst_offset, mask), c, sh.size, mask,
                                f"shared array {sh.name}", "TmaLoad", align=4)
        src = np.broadcast_to(src, self.shape)[rows, tids]
        dst = np.broadcast_to(dst, self.shape)[rows, tids]
        span = np.arange(c, dtype=I64)
        keys = (rows * sh.size + dst)[:, None] + span
        self._land(sh, "TmaLoad", s.expect, mb, rows, tids, sl, keys, _cast(buf[src[:, None] + span], F32))

    def s_tma_tensor_load(self, s: K.TmaTensorLoad, mask):
        """The box of the tensor map at the issuing thread's coordinates, elements outside the
        tensor zero, written row-major and swizzled as the map says (where the bytes land:
        a read with another XOR reads other elements)."""
        mb = self.mbar(s.barrier, "TmaTensorLoad")
        try:
            tmap = self.k.tensor_map(s.tensor_map)
        except KeyError:
            self.fail(f"TmaTensorLoad through {s.tensor_map!r}, which is no tensor map of the kernel")
        if len(s.coords) != len(tmap.box) or len(tmap.box) != len(tmap.shape):
            self.fail(f"TmaTensorLoad through {tmap.name}: {len(s.coords)} coordinates for a box of rank "
                      f"{len(tmap.box)} over a tensor of rank {len(tmap.shape)}")
        rows, tids, sl = self.mbar_threads(mb, s.slot, mask, "TmaTensorLoad")
        if rows.size == 0:
            return
        self._one_issuer(rows, f"TmaTensorLoad into {s.array}")
        buf = self.gbuf(tmap.buffer, "TmaTensorLoad")
        if buf.size != int(np.prod(tmap.shape)):
            self.fail(f"tensor map {tmap.name} describes {tmap.buffer} as {tmap.shape}, but it holds {buf.size} elements")
        sh = self.sarr(s.array, "TmaTensorLoad")
        n = tmap.box_bytes // 4
        line = max(128, REPEAT[tmap.swizzle])          # where a box (and its swizzle pattern) may start
        dst = self.check_bounds(self.ev_int(s.dst_offset, mask), n, sh.size, mask,
                                f"shared array {sh.name}", "TmaTensorLoad", align=line // 4)
        dst = np.broadcast_to(dst, self.shape)[rows, tids]
        origins = np.stack([np.broadcast_to(self.ev_int(c, mask), self.shape)[rows, tids] for c in s.coords], axis=1)
        values = _cast(box_values(buf, tmap.shape, tmap.box, origins), F32)
        keys = (rows * sh.size + dst)[:, None] + swizzle_word(np.arange(n, dtype=I64), tmap.swizzle)
        self._land(sh, "TmaTensorLoad", s.expect, mb, rows, tids, sl, keys, values)

    def _land(self, sh, kind, expect, mb, rows, tids, sl, keys, values):
        """A TMA copy's `values` written at shared `keys` (one row per issuing thread), in
        flight on mb[sl] until a wait observes the phase its bytes complete, after the
        pending-copy and race checks; `expect`: the copy announces its own bytes."""
        issuer = np.broadcast_to(tids.astype(np.int32)[:, None], keys.shape)
        if sh.has_pending and (sh.pend.reshape(-1)[keys] != 0).any():
            self.fail(f"{kind} into shared array {sh.name} overwrites an async copy still in flight")
        if self.check:
            lanes = np.broadcast_to((rows * self.T + tids)[:, None], keys.shape).reshape(-1)
            if sh.dirty:
                w = sh.lw.reshape(-1)[keys].reshape(-1)
                bad = (w >= 0) & (w != issuer.reshape(-1))
                if bad.any():
                    self.race_flat(sh, kind, keys.reshape(-1), lanes, w, bad, "already written")
            self.fold_reads(sh)
            if sh.lr_dirty:
                self.check_slot_released(sh, keys, rows, tids, issuer)
        self.check_proxy_fenced(sh, keys, rows, tids)
        nbytes = 4 * keys.shape[1]
        if expect:                    # the issuer's own arrive.expect_tx, then its bytes land
            self.mbar_arrive(mb, rows, tids, sl, nbytes)
        sh.flat[keys] = values
        tags = -(1 + mb.id + sl + MBAR_IDS * mb.phase[rows, sl])
        if sh.pend is None:
            sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
        sh.pend.reshape(-1)[keys] = np.broadcast_to(tags[:, None], keys.shape).astype(np.int32)
        sh.has_pending = True
        np.add.at(mb.tx, (rows, sl), -nbytes)          # complete_tx: the copy's bytes landed
        self.mbar_complete(mb, rows, sl)
        self.stats.global_bytes_loaded += keys.size * 4
        self.stats.shared_bytes_stored += keys.size * 4

    def note_generic(self, sh, keys, tids, n):
        """Ordinary stores at flat keys (+0..n-1) by threads tids: not yet proxy-fenced."""
        if sh.gw is None:
            sh.gw = np.full((self.nb, sh.size), -1, dtype=np.int32)
        gwf = sh.gw.reshape(-1)
        for j in range(n):
            gwf[keys + j] = tids

    def s_proxy_fence(self, s, mask):
        act = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        for sh in self.shared.values():
            if sh.gw is not None:
                rows = np.arange(self.nb)[:, None]
                sh.gw[(sh.gw >= 0) & act[rows, np.maximum(sh.gw, 0)]] = -1

    def check_proxy_fenced(self, sh, keys, rows, tids):
        """An async-proxy copy may not meet ordinary stores to its shared memory that their
        threads did not order before it with fence.proxy.async."""
        if sh.gw is None:
            return
        w = sh.gw.reshape(-1)[keys]
        if (w >= 0).any():
            i, j = (int(x[0]) for x in np.nonzero(w >= 0))
            self.fail(f"TmaLoad (async proxy) into element {int(keys[i, j]) % sh.size} of shared array {sh.name} "
                      f"in block {self.block_index(int(rows[i]))}, which thread {self.thread_index(int(w[i, j]))} "
                      f"wrote with an ordinary store not followed by fence.proxy.async (ProxyFence)")

    def check_slot_released(self, sh, keys, rows, tids, issuer):
        """A copy may overwrite what other threads read only once their reads are ordered
        before it: by a Barrier (which clears the read table) or by an mbarrier phase every
        thread arrived on after reading (a ring's empty barrier) that the issuer waited for."""
        r_ = sh.lr.reshape(-1)[keys]
        bad = (r_ == -2) | ((r_ >= 0) & (r_ != issuer))
        if not bad.any():
            return
        got = np.full(rows.size, -1, dtype=I64) if self.acquired is None else self.acquired[rows, tids]
        bad &= sh.rt.reshape(-1)[keys] > got[:, None]
        if bad.any():
            i, j = (int(x[0]) for x in np.nonzero(bad))
            w = int(r_[i, j])
            who = "several threads" if w == -2 else f"thread {self.thread_index(w)}"
            self.fail(f"TMA copy by thread {self.thread_index(int(tids[i]))} of block "
                      f"{self.block_index(int(rows[i]))} overwrites element {int(keys[i, j]) % sh.size} of "
                      f"shared array {sh.name}, read by {who} and not yet released: the slot is still "
                      f"being read (wait for its empty mbarrier's phase, or a Barrier, before refilling it)")

    # -- mbarriers ------------------------------------------------------------------------------
    #
    # Every mbarrier (each slot of an array) has an id; a TMA copy in flight marks the shared
    # elements it wrote with the tag -(1 + id + MBAR_IDS * phase), the phase of that barrier
    # its bytes complete, and a wait that observes that phase clears the mark for its block.
    # A phase completes when `count` arrivals were made and every announced transaction
    # byte landed (copies land when issued: the data is written at once, marked in flight).
    # try_wait.parity P passes when the barrier's last completed phase has parity P (a fresh
    # barrier counts parity 1 as done); otherwise the phase would have to complete while the
    # block waits, which in the simulator's lockstep execution nobody can make happen:
    # a deadlock (a missing arrive, missing bytes, or a wait for the wrong phase).

    def mbar_name(self, tag_value):
        ident = tag_value % MBAR_IDS
        for name, mb in self.mbars.items():
            if mb.id <= ident < mb.id + mb.slots:
                return name if mb.slots == 1 else f"{name}[{ident - mb.id}]"
        return f"#{ident}"

    def s_mbar_init(self, s: K.MbarrierInit, mask):
        mb = self.mbars.get(s.name)
        if mb is None:
            base = sum(m.slots for m in self.mbars.values())
            if base + s.slots > MBAR_IDS:
                self.fail(f"more than {MBAR_IDS} mbarriers in one kernel")
            self.mbars[s.name] = _MBar(base, s.name, int(s.count), int(s.slots), self.nb, self.T)
            return
        if mb.slots != s.slots or mb.count != s.count:
            self.fail(f"mbarrier {s.name} initialised twice with different counts or slots")
        rows = self.block_rows(mask)
        for table, v in ((mb.phase, 0), (mb.arrived, 0), (mb.tx, 0), (mb.first, -1), (mb.released, -1)):
            table[rows] = v
        mb.who[rows] = False

    def block_rows(self, mask):
        if mask is None:
            return np.ones(self.nb, dtype=bool)
        return np.broadcast_to(np.broadcast_to(mask, (mask.shape[0], self.T)).any(axis=1), (self.nb,))

    def mbar(self, name, kind) -> _MBar:
        mb = self.mbars.get(name)
        if mb is None:
            self.fail(f"{kind} on mbarrier {name!r}, which is not initialised (MbarrierInit)")
        return mb

    def mbar_threads(self, mb: _MBar, slot, mask, kind):
        """(rows, thread ids, slots) of the active threads for a statement on mb[slot]."""
        act = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        rows, tids = np.nonzero(act)
        if slot is None:
            return rows, tids, np.zeros(rows.size, dtype=I64)
        sl = np.broadcast_to(self.ev_int(slot, mask), self.shape)[rows, tids].astype(I64)
        bad = (sl < 0) | (sl >= mb.slots)
        if bad.any():
            self.fail(f"{kind} on mbarrier {mb.name}[{int(sl[bad][0])}], which has {mb.slots} slots "
                      f"(thread {self.thread_index(int(tids[bad][0]))} of block "
                      f"{self.block_index(int(rows[bad][0]))})")
        return rows, tids, sl

    def mbar_arrive(self, mb: _MBar, rows, tids, sl, expect_tx=0):
        self.tick += 1
        np.add.at(mb.arrived, (rows, sl), 1)
        if expect_tx:
            np.add.at(mb.tx, (rows, sl), int(expect_tx))
        mb.who[rows, sl, tids] = True
        first = mb.first[rows, sl]
        mb.first[rows, sl] = np.where(first < 0, self.tick, first)
        self.mbar_complete(mb, rows, sl)

    def mbar_complete(self, mb: _MBar, rows, sl):
        """Complete the current phase of every touched mb[slot] whose arrivals and bytes are in."""
        done = (mb.arrived[rows, sl] >= mb.count) & (mb.tx[rows, sl] == 0)
        if not done.any():
            return
        r, q = rows[done], sl[done]
        every = mb.who[r, q].all(axis=-1)
        mb.released[r, q] = np.where(every, mb.first[r, q], -1)
        mb.phase[r, q] += 1
        mb.arrived[r, q] = 0
        mb.who[r, q] = False
        mb.first[r, q] = -1

    def s_mbar_arrive(self, s: K.MbarrierArrive, mask):
        mb = self.mbar(s.name, "MbarrierArrive")
        rows, tids, sl = self.mbar_threads(mb, s.slot, mask, "MbarrierArrive")
        if rows.size:
            self.mbar_arrive(mb, rows, tids, sl, s.expect_tx)

    def s_mbar_wait(self, s: K.MbarrierWait, mask):
        mb = self.mbar(s.name, "MbarrierWait")
        rows, tids, sl = self.mbar_threads(mb, s.slot, mask, "MbarrierWait")
        if rows.size == 0:
            return
        want = np.broadcast_to(self.ev_int(s.phase, mask), self.shape)[rows, tids].astype(I64) & 1
        c = mb.phase[rows, sl]
        ok = np.where(c >= 1, ((c - 1) & 1) == want, want == 1)
        if not ok.all():
            i = int(np.nonzero(~ok)[0][0])
            r, q = int(rows[i]), int(sl[i])
            name = s.name if mb.slots == 1 else f"{s.name}[{q}]"
            self.fail(f"MbarrierWait on {name} waits for phase parity {int(want[i])} but block "
                      f"{self.block_index(r)} is in phase {int(c[i])} ({int(mb.arrived[r, q])} of {mb.count} "
                      f"arrivals, {int(mb.tx[r, q])} transaction bytes outstanding), which never completes "
                      f"while the block waits: a missing arrive or copy, or a wait for the wrong phase "
                      f"(stale or deadlocking wait)")
        # the wait observes phase c - 1: its copies are visible to the waiters' blocks, and
        # the reads released by its arrivals are ordered before the waiters' next accesses
        seen = np.full(self.nb, -1, dtype=I64)
        ident = np.full(self.nb, -1, dtype=I64)
        seen[rows] = c - 1
        ident[rows] = mb.id + sl
        for sh in self.shared.values():
            if sh.has_pending:
                v = -sh.pend.astype(I64) - 1
                hit = (sh.pend < 0) & (v % MBAR_IDS == ident[:, None]) & (v // MBAR_IDS <= seen[:, None])
                if hit.any():
                    sh.pend[hit] = 0
                    if sh.lw is not None:     # completed TMA data is visible to every waiter
                        sh.lw[hit] = -1
                    sh.has_pending = bool(sh.pend.any())
        if self.acquired is None:
            self.acquired = np.full((self.nb, self.T), -1, dtype=I64)
        np.maximum.at(self.acquired, (rows, tids), mb.released[rows, sl])
