"""Asynchronous copies into shared memory: cp.async with its commit groups and waits, and TMA
copies (1-D bulk runs, tensor-map boxes with zero fill and swizzle) completed by mbarrier waits (phase parity, deadlock checks). A mixin of _Chunk
(exec.py); the data lands immediately and is marked in flight in the shared array's table."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ...ir.swizzle import REPEAT, swizzle_word
from ..tensor_map import box_values
from .memory import _MBar
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
        if sh.pend is None:
            sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
        pf = sh.pend.reshape(-1)
        for j in range(n):
            pf[keys + j] = tag
        sh.has_pending = True

    def s_cp_commit(self, s, mask):
        self.cp_committed = self.cp_open
        self.cp_open += 1

    def s_cp_wait(self, s: K.CpAsyncWait, mask):
        done = self.cp_committed - int(s.pending)
        for sh in self.shared.values():
            if sh.has_pending:
                p = sh.pend
                p[(p > 0) & (p <= done)] = 0
                sh.has_pending = bool(p.any())

    def mbar_name(self, ident):
        for name, mb in self.mbars.items():
            if mb.id == ident:
                return name
        return f"#{ident}"

    def s_mbar_init(self, s: K.MbarrierInit, mask):
        mb = self.mbars.get(s.name)
        if mb is None:
            self.mbars[s.name] = _MBar(len(self.mbars), s.count, self.nb)
        else:
            rows = self.block_rows(mask)
            mb.phase[rows] = 0
            mb.inflight[rows] = False

    def block_rows(self, mask):
        if mask is None:
            return np.ones(self.nb, dtype=bool)
        return np.broadcast_to(np.broadcast_to(mask, (mask.shape[0], self.T)).any(axis=1), (self.nb,))

    def _one_issuer(self, mask, what):
        """(blocks, threads) of the active lanes, failing unless one thread per block issues."""
        act = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        rows, tids = np.nonzero(act)
        per_block = np.bincount(rows, minlength=self.nb)
        if rows.size and per_block.max() > 1:
            r = int(np.argmax(per_block))
            self.fail(f"{what} issued by {int(per_block[r])} threads of block "
                      f"{self.block_index(r)}; a TMA copy is issued by one thread")
        return rows, tids

    def _mbar_of(self, name, kind):
        mb = self.mbars.get(name)
        if mb is None:
            self.fail(f"{kind} on mbarrier {name!r}, which is not initialised (MbarrierInit)")
        return mb

    def s_tma_load(self, s: K.TmaLoad, mask):
        mb = self._mbar_of(s.barrier, "TmaLoad")
        rows, tids = self._one_issuer(mask, f"TmaLoad into {s.array}")
        if rows.size == 0:
            return
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
        self._land(sh, "TmaLoad", rows, tids, keys, _cast(buf[src[:, None] + span], F32), mb)

    def s_tma_tensor_load(self, s: K.TmaTensorLoad, mask):
        """The box of the tensor map at the issuing thread's coordinates, elements outside the
        tensor zero, written row-major and swizzled as the map says (where the bytes land:
        a read with another XOR reads other elements)."""
        mb = self._mbar_of(s.barrier, "TmaTensorLoad")
        try:
            tmap = self.k.tensor_map(s.tensor_map)
        except KeyError:
            self.fail(f"TmaTensorLoad through {s.tensor_map!r}, which is no tensor map of the kernel")
        if len(s.coords) != len(tmap.box) or len(tmap.box) != len(tmap.shape):
            self.fail(f"TmaTensorLoad through {tmap.name}: {len(s.coords)} coordinates for a box of rank "
                      f"{len(tmap.box)} over a tensor of rank {len(tmap.shape)}")
        rows, tids = self._one_issuer(mask, f"TmaTensorLoad into {s.array}")
        if rows.size == 0:
            return
        buf = self.gbuf(tmap.buffer, "TmaTensorLoad")
        if buf.size != int(np.prod(tmap.shape)):
            self.fail(f"tensor map {tmap.name} describes {tmap.buffer} as {tmap.shape}, but it holds {buf.size} elements")
        sh = self.sarr(s.array, "TmaTensorLoad")
        n = tmap.box_bytes // 4
        line = max(128, REPEAT[tmap.swizzle])
        dst = self.check_bounds(self.ev_int(s.dst_offset, mask), n, sh.size, mask,
                                f"shared array {sh.name}", "TmaTensorLoad", align=line // 4)
        dst = np.broadcast_to(dst, self.shape)[rows, tids]
        origins = np.stack([np.broadcast_to(self.ev_int(c, mask), self.shape)[rows, tids] for c in s.coords], axis=1)
        values = _cast(box_values(buf, tmap.shape, tmap.box, origins), F32)
        at = swizzle_word(np.arange(n, dtype=I64), tmap.swizzle)
        keys = (rows * sh.size + dst)[:, None] + at
        self._land(sh, "TmaTensorLoad", rows, tids, keys, values, mb)

    def _land(self, sh, kind, rows, tids, keys, values, mb):
        """Write a TMA copy's values at shared `keys` (one row per issuing thread) as in
        flight on mbarrier `mb`, after the pending-copy and race checks."""
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
                r_ = sh.lr.reshape(-1)[keys].reshape(-1)
                bad = (r_ == -2) | ((r_ >= 0) & (r_ != issuer.reshape(-1)))
                if bad.any():
                    self.race_flat(sh, kind, keys.reshape(-1), lanes, r_, bad, "read")
        sh.flat[keys] = values
        self.mark_pending(sh, keys.reshape(-1), 1, -(mb.id + 1))
        mb.inflight[rows] = True
        self.stats.global_bytes_loaded += keys.size * 4
        self.stats.shared_bytes_stored += keys.size * 4

    def s_mbar_wait(self, s: K.MbarrierWait, mask):
        mb = self.mbars.get(s.name)
        if mb is None:
            self.fail(f"MbarrierWait on {s.name!r}, which is not initialised (MbarrierInit)")
        rows = self.block_rows(mask)
        phase = self.ev_int(s.phase, mask)
        want = (mb.phase & 1).reshape(self.nb, 1)
        bad = (phase & 1) != want
        if mask is not None:
            bad = bad & mask
        if np.any(bad):
            r = int(np.nonzero(np.broadcast_to(bad, self.shape))[0][0])
            self.fail(f"MbarrierWait on {s.name} waits for phase parity "
                      f"{int(np.broadcast_to(phase, self.shape)[np.broadcast_to(bad, self.shape)][0]) & 1}"
                      f" but block {self.block_index(r)} is in phase {int(mb.phase[r])} "
                      f"(stale or deadlocking wait)")
        idle = rows & ~mb.inflight
        if idle.any():
            r = int(np.nonzero(idle)[0][0])
            self.fail(f"MbarrierWait on {s.name} in block {self.block_index(r)} with no TmaLoad in "
                      f"flight: the phase never completes (deadlock)")
        tag = -(mb.id + 1)
        for sh in self.shared.values():
            if sh.has_pending:
                hit = (sh.pend == tag) & rows[:, None]
                if hit.any():
                    sh.pend[hit] = 0
                    if sh.lw is not None:     # completed TMA data is visible to every waiter
                        sh.lw[hit] = -1
                    sh.has_pending = bool(sh.pend.any())
        mb.phase[rows] += 1
        mb.inflight[rows] = False

