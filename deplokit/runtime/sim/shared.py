"""Shared memory accesses of a chunk: declaration, reads and writes (float and float4) with the
cp.async / TMA in-flight checks, the race tables (last writer, lazily folded readers) and the
missing-__syncthreads checks, and Barrier, which must be reached by every thread of a block
and resets the race tables. A mixin of _Chunk (exec.py)."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from .banks import wavefronts
from .memory import _Shared
from .values import I64, _cast, _dtype_of, _last_per_key


class _SharedMemory:
    """Shared-memory statements and expressions of _Chunk, its race checks, and Barrier."""

    def s_shared_array(self, s: K.SharedArray, mask):
        sh = self.shared.get(s.name)
        if sh is None:
            self.shared[s.name] = _Shared(s.name, int(s.size), self.nb, _dtype_of(s.ctype))
        elif sh.size != s.size:
            self.fail(f"shared array {s.name} declared twice with sizes {sh.size} and {s.size}")

    def sarr(self, name, kind):
        sh = self.shared.get(name)
        if sh is None:
            self.fail(f"{kind} names shared array {name!r}, which is not declared (SharedArray)")
        return sh

    def gather(self, table, off):
        """table (nb, size) at per-thread offsets off -> (nb, off's thread extent)."""
        if np.ndim(off) == 0:
            return table[:, int(off)].reshape(-1, 1).copy()
        if off.shape[0] == 1:
            return np.take(table, off[0], axis=1)
        return np.take_along_axis(table, np.broadcast_to(off, (self.nb, off.shape[1])), axis=1)

    def shared_read(self, sh: _Shared, off, n, mask, kind):
        off = self.check_bounds(off, n, sh.size, mask, f"shared array {sh.name}", kind, align=n)
        if sh.has_pending:
            for j in range(n):
                p = self.gather(sh.pend, off + j)
                bad = p != 0 if mask is None else (p != 0) & mask
                if bad.any():
                    tag = int(np.broadcast_to(p, self.shape)[np.broadcast_to(bad, self.shape)][0])
                    what = (f"cp.async group {tag}, not yet waited for (CpAsyncWait)" if tag > 0 else
                            f"a TmaLoad not yet completed (MbarrierWait on {self.mbar_name(-tag - 1)})")
                    self.fail(f"{kind} reads shared array {sh.name} before its data lands: "
                              f"written by {what} ({self.where(bad)})")
        if self.check:
            if sh.dirty:
                for j in range(n):
                    w = self.gather(sh.lw, off + j)
                    bad = (w >= 0) & (w != self.tid)
                    if mask is not None:
                        bad = bad & mask
                    if bad.any():
                        self.race(sh, kind, off + j, w, bad, "written")
            self.tick += 1
            sh.reads.append((off, mask, n, self.tick))
        self.stats.shared_bytes_loaded += self.count(mask) * 4 * n
        fronts, phases = wavefronts(off, n, mask, self.shape)
        self.stats.shared_load_wavefronts += fronts
        self.stats.shared_load_phases += phases
        return [self.gather(sh.data, off + j) for j in range(n)]

    def race(self, sh, kind, off, other, bad, how):
        bad = np.broadcast_to(bad, self.shape)
        r, t = (int(i[0]) for i in np.nonzero(bad))
        o = int(np.broadcast_to(off, self.shape)[r, t])
        w = int(np.broadcast_to(other, self.shape)[r, t])
        who = "several threads" if w == -2 else f"thread {self.thread_index(w)}"
        action = "reads" if kind in ("SharedLoad", "VectorLoad") else "writes"
        self.fail(f"race on shared array {sh.name} in {kind}: thread {self.thread_index(t)} of "
                  f"block {self.block_index(r)} {action} element {o}, {how} by {who} "
                  f"with no Barrier between (missing __syncthreads?)")

    def fold_reads(self, sh: _Shared):
        if not sh.reads:
            return
        if sh.lr is None:
            sh.lr = np.full((self.nb, sh.size), -1, dtype=np.int32)
            sh.rt = np.full((self.nb, sh.size), -1, dtype=I64)
        lrf, rtf = sh.lr.reshape(-1), sh.rt.reshape(-1)
        for off, mask, n, tick in sh.reads:
            keys = self.active(self.rows * sh.size + off, mask)
            tids = self.active(self.tid, mask).astype(np.int32)
            for j in range(n):
                kj = keys + j
                cur = lrf[kj]
                new = np.where((cur == -1) | (cur == tids), tids, np.int32(-2))
                lrf[kj] = new
                lrf[kj[lrf[kj] != new]] = -2
                rtf[kj] = tick
        sh.reads.clear()
        sh.lr_dirty = True

    def shared_write(self, sh: _Shared, off, values, mask, kind, align=1, pend_tag=None):
        """Store values[j] at off+j for every active thread, after the conflict, pending-copy
        and race checks; pend_tag (per block: its open cp.async group) marks the elements as
        an async copy in flight."""
        n = len(values)
        off = self.check_bounds(off, n, sh.size, mask, f"shared array {sh.name}", kind, align)
        if np.ndim(off) == 0 or off.shape[0] == 1:
            if mask is None or mask.shape[0] == 1:
                return self.shared_write_cols(sh, off, values, mask, kind, pend_tag)
        keys = self.active(self.rows * sh.size + off, mask)
        if keys.size == 0:
            return
        lanes = self.active(self.lanes.reshape(self.shape), mask)
        vals = [_cast(self.active(v, mask), sh.data.dtype) for v in values]
        if sh.scratch is None:
            sh.scratch = np.empty(sh.flat.size, dtype=I64)
        sh.scratch[keys] = lanes
        dup = sh.scratch[keys] != lanes
        if dup.any():
            if self.check:
                i = int(np.nonzero(dup)[0][0])
                a, b = int(lanes[i]), int(sh.scratch[keys[i]])
                self.conflict(sh, kind, b % self.T, a % self.T, a // self.T, int(keys[i]) % sh.size)
            win = _last_per_key(keys)              # highest thread id wins, deterministically
            keys, lanes, vals = keys[win], lanes[win], [v[win] for v in vals]
        tids = (lanes % self.T).astype(np.int32)
        if sh.has_pending:
            for j in range(n):
                p = sh.pend.reshape(-1)[keys + j]
                if (p != 0).any():
                    i = int(np.nonzero(p != 0)[0][0])
                    self.overwrite_pending(sh, kind, int(keys[i] + j) % sh.size)
        if self.check:
            if sh.dirty:
                lwf = sh.lw.reshape(-1)
                for j in range(n):
                    w = lwf[keys + j]
                    bad = (w >= 0) & (w != tids)
                    if bad.any():
                        self.race_flat(sh, kind, keys + j, lanes, w, bad, "already written")
            self.fold_reads(sh)
            if sh.lr_dirty:
                lrf = sh.lr.reshape(-1)
                for j in range(n):
                    r = lrf[keys + j]
                    bad = (r == -2) | ((r >= 0) & (r != tids))
                    if bad.any():
                        self.race_flat(sh, kind, keys + j, lanes, r, bad, "read")
            if sh.lw is None:
                sh.lw = np.full((self.nb, sh.size), -1, dtype=np.int32)
            lwf = sh.lw.reshape(-1)
            for j in range(n):
                lwf[keys + j] = tids
            sh.dirty = True
        for j, v in enumerate(vals):
            sh.flat[keys + j] = v
        if pend_tag is not None:
            self.mark_pending(sh, keys, n, pend_tag)
        elif self.proxy_watch:
            self.note_generic(sh, keys, tids, n)
        self.stats.shared_bytes_stored += keys.size * 4 * n

    def shared_write_cols(self, sh: _Shared, off, values, mask, kind, pend_tag):
        """shared_write when the offsets and the mask are the same in every block: the work
        is on columns (one per active thread) of the (blocks, size) tables."""
        T, n = self.T, len(values)
        o = np.broadcast_to(off, (1, T))[0]
        act = None if mask is None else np.broadcast_to(mask, (1, T))[0]
        cols = o if act is None else o[act]
        if cols.size == 0:
            return
        tids = np.arange(T, dtype=np.int32) if act is None else np.nonzero(act)[0].astype(np.int32)
        vals = []
        for v in values:
            v = _cast(np.asarray(v), sh.data.dtype)
            if np.ndim(v) == 0:
                vals.append(v)
            else:
                v = np.broadcast_to(v, (v.shape[0], T))
                vals.append(v if act is None else v[:, act])
        if np.unique(cols).size != cols.size:
            win = _last_per_key(cols)           # highest thread id wins, deterministically
            if self.check:
                lost = np.setdiff1d(np.arange(cols.size), win)[0]
                dst = int(cols[lost])
                other = int(tids[np.nonzero(cols == dst)[0][-1]])
                self.conflict(sh, kind, int(tids[lost]), other, 0, dst)
            cols, tids = cols[win], tids[win]
            vals = [v if np.ndim(v) == 0 else v[:, win] for v in vals]
        if sh.has_pending:
            for j in range(n):
                p = sh.pend[:, cols + j]
                if (p != 0).any():
                    _, c = np.nonzero(p)
                    self.overwrite_pending(sh, kind, int(cols[c[0]] + j))
        if self.check:
            if sh.dirty:
                for j in range(n):
                    w = sh.lw[:, cols + j]
                    bad = (w >= 0) & (w != tids)
                    if bad.any():
                        self.race_cols(sh, kind, cols + j, tids, w, bad, "already written")
            self.fold_reads(sh)
            if sh.lr_dirty:
                for j in range(n):
                    r = sh.lr[:, cols + j]
                    bad = (r == -2) | ((r >= 0) & (r != tids))
                    if bad.any():
                        self.race_cols(sh, kind, cols + j, tids, r, bad, "read")
            if sh.lw is None:
                sh.lw = np.full((self.nb, sh.size), -1, dtype=np.int32)
            for j in range(n):
                sh.lw[:, cols + j] = tids
            sh.dirty = True
        for j, v in enumerate(vals):
            sh.data[:, cols + j] = v
        if pend_tag is None and self.proxy_watch:
            keys = (np.arange(self.nb, dtype=I64)[:, None] * sh.size + cols).reshape(-1)
            self.note_generic(sh, keys, np.broadcast_to(tids, (self.nb, tids.size)).reshape(-1), n)
        if pend_tag is not None:
            if sh.pend is None:
                sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
            for j in range(n):
                sh.pend[:, cols + j] = pend_tag[:, None]
            sh.has_pending = True
        self.stats.shared_bytes_stored += self.nb * cols.size * 4 * n

    def conflict(self, sh, kind, t1, t2, row, element):
        self.fail(f"{kind} write-write conflict on shared array {sh.name}: threads "
                  f"{self.thread_index(t1)} and {self.thread_index(t2)} of block "
                  f"{self.block_index(row)} store to element {element} in one statement")

    def overwrite_pending(self, sh, kind, element):
        self.fail(f"{kind} on shared array {sh.name} overwrites element {element} while an "
                  f"async copy into it is in flight")

    def race_cols(self, sh, kind, cols, tids, other, bad, how):
        r, c = (int(i[0]) for i in np.nonzero(bad))
        w = int(other[r, c])
        who = "several threads" if w == -2 else f"thread {self.thread_index(w)}"
        self.fail(f"race on shared array {sh.name} in {kind}: thread {self.thread_index(int(tids[c]))} "
                  f"of block {self.block_index(r)} writes element {int(cols[c])}, {how} by {who} "
                  f"with no Barrier between (missing __syncthreads?)")

    def race_flat(self, sh, kind, keys, lanes, other, bad, how):
        i = int(np.nonzero(bad)[0][0])
        lane, w = int(lanes[i]), int(other[i])
        who = "several threads" if w == -2 else f"thread {self.thread_index(w)}"
        self.fail(f"race on shared array {sh.name} in {kind}: thread {self.thread_index(lane % self.T)} "
                  f"of block {self.block_index(lane // self.T)} writes element "
                  f"{int(keys[i]) % sh.size}, {how} by {who} with no Barrier between "
                  f"(missing __syncthreads?)")

    def e_shared_load(self, e: K.SharedLoad, mask):
        sh = self.sarr(e.array, "SharedLoad")
        return self.shared_read(sh, self.ev_int(e.offset, mask), 1, mask, "SharedLoad")[0]

    def s_shared_store(self, s: K.SharedStore, mask):
        sh = self.sarr(s.array, "SharedStore")
        off = self.ev_int(s.offset, mask)
        self.shared_write(sh, off, [self.ev(s.value, mask)], mask, "SharedStore")

    # -- barriers -----------------------------------------------------------------------------

    def s_barrier(self, s, mask):
        rows = None
        if mask is not None:
            if mask.shape[-1] != 1:
                m = np.broadcast_to(mask, (mask.shape[0], self.T))
                some, every = m.any(axis=1), m.all(axis=1)
                part = some & ~every
                if part.any():
                    r = int(np.nonzero(part)[0][0])
                    r_block = r if mask.shape[0] > 1 else 0
                    self.fail(f"Barrier in divergent control flow: only {int(m[r].sum())} of "
                              f"{self.T} threads of block {self.block_index(r_block)} reach it "
                              f"(__syncthreads must be reached by every thread of the block)")
                rows = np.broadcast_to(some, (self.nb,))
            else:
                rows = np.broadcast_to(mask[:, 0], (self.nb,))
            if rows.all():
                rows = None
        self.stats.barriers += self.nb if rows is None else int(rows.sum())
        for sh in self.shared.values():
            if rows is None:
                if sh.dirty:
                    sh.lw.fill(-1)
                    sh.dirty = False
                sh.reads.clear()
                if sh.lr_dirty:
                    sh.lr.fill(-1)
                    sh.lr_dirty = False
            else:
                self.fold_reads(sh)
                if sh.lw is not None:
                    sh.lw[rows] = -1
                if sh.lr is not None:
                    sh.lr[rows] = -1
