"""Global memory accesses of a chunk: bounds and alignment checks, loads, stores with the
write-write conflict check, and atomic adds. A mixin of _Chunk (exec.py), whose attributes
(buffers, params, scratch, stats, shape, lanes, T, check) it uses."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from .values import I64, _cast, _dtype_of, _last_per_key


class _GlobalMemory:
    """Global-memory statements and expressions of _Chunk."""

    def gbuf(self, name, kind):
        buf = self.buffers.get(name)
        if buf is None:
            self.fail(f"{kind} names {name!r}, which is not a kernel parameter")
        return buf

    def check_bounds(self, off, n, size, mask, what, kind, align=1):
        """Fail when an active thread's run off..off+n-1 leaves 0..size-1 (or is misaligned);
        return off with inactive out-of-range lanes clamped to 0."""
        bad_all = (off < 0) | (off + n > size)
        if align > 1:
            bad_al = (off % align) != 0
            if mask is not None:
                bad_al = bad_al & mask
            if np.any(bad_al):
                o = int(np.broadcast_to(off, self.shape)[np.broadcast_to(bad_al, self.shape)][0])
                self.fail(f"{kind} on {what} at offset {o}: not {4 * align}-byte aligned "
                          f"({self.where(bad_al)})")
        if not np.any(bad_all):
            return off
        bad = bad_all if mask is None else (bad_all & mask)
        if np.any(bad):
            o = int(np.broadcast_to(off, self.shape)[np.broadcast_to(bad, self.shape)][0])
            span = f"offset {o}" if n == 1 else f"offsets {o}..{o + n - 1}"
            self.fail(f"{kind} out of bounds on {what}: {span} outside [0, {size}) "
                      f"({self.where(bad)})")
        return np.where(bad_all, 0, off)

    def e_global_load(self, e: K.GlobalLoad, mask):
        buf = self.gbuf(e.buffer, "GlobalLoad")
        off = self.check_bounds(self.ev_int(e.offset, mask), 1, buf.size, mask,
                                f"buffer {e.buffer}", "GlobalLoad")
        v = np.take(buf, off)
        self.stats.global_bytes_loaded += self.count(mask) * buf.itemsize
        self.stats.global_loads += self.count(mask)
        return _cast(v, _dtype_of(e.ctype))

    def global_write(self, name, kind, off, values, mask, align=1):
        p = self.params[name] if name in self.params else None
        buf = self.gbuf(name, kind)
        if p is not None and p.const:
            self.fail(f"{kind} to read-only parameter {name}")
        n = len(values)
        off = self.check_bounds(off, n, buf.size, mask, f"buffer {name}", kind, align)
        keys = self.active(off, mask)
        if keys.size == 0:
            return
        lanes = self.active(self.lanes.reshape(self.shape), mask)
        vals = [_cast(self.active(v, mask), buf.dtype) for v in values]
        scr = self.scratch.get(name)
        if scr is None:
            scr = self.scratch[name] = np.empty(buf.size, dtype=I64)
        scr[keys] = lanes
        dup = scr[keys] != lanes
        for j, v in enumerate(vals):
            buf[keys + j] = v
        if dup.any():
            differ = np.zeros(keys.size, dtype=bool)
            for j, v in enumerate(vals):
                got = buf[keys + j]
                differ |= (got != v) & ~(np.isnan(got) & np.isnan(v)) if v.dtype.kind == "f" else (got != v)
            if differ.any():
                if self.check:
                    i = int(np.nonzero(differ)[0][0])
                    other = int(scr[keys[i]])
                    lane = int(lanes[i])
                    self.fail(f"{kind} write-write conflict on buffer {name} at offset {int(keys[i])}: "
                              f"block {self.block_index(lane // self.T)} thread "
                              f"{self.thread_index(lane % self.T)} and block "
                              f"{self.block_index(other // self.T)} thread "
                              f"{self.thread_index(other % self.T)} store different values "
                              f"in one statement")
                win = _last_per_key(keys)          # highest lane wins, deterministically
                for j, v in enumerate(vals):
                    buf[keys[win] + j] = v[win]
        self.stats.global_bytes_stored += keys.size * n * buf.itemsize
        self.stats.global_stores += keys.size

    def s_global_store(self, s: K.GlobalStore, mask):
        off = self.ev_int(s.offset, mask)
        self.global_write(s.buffer, "GlobalStore", off, [self.ev(s.value, mask)], mask)

    def s_atomic_add(self, s: K.AtomicAdd, mask):
        """Every active thread's add lands, also where several threads (of one block or of the
        blocks of the chunk) add into one element: applied one by one in lane order (np.add.at),
        so the float result is deterministic."""
        p = self.params.get(s.buffer)
        buf = self.gbuf(s.buffer, "AtomicAdd")
        if p is not None and p.const:
            self.fail(f"AtomicAdd to read-only parameter {s.buffer}")
        if buf.dtype.kind != "f":
            self.fail(f"AtomicAdd into {s.buffer}, a buffer of {buf.dtype}")
        off = self.check_bounds(self.ev_int(s.offset, mask), 1, buf.size, mask,
                                f"buffer {s.buffer}", "AtomicAdd")
        value = self.ev(s.value, mask)
        keys = self.active(off, mask)
        if keys.size == 0:
            return
        np.add.at(buf, keys, _cast(self.active(value, mask), buf.dtype))
        self.stats.global_bytes_loaded += keys.size * buf.itemsize
        self.stats.global_bytes_stored += keys.size * buf.itemsize
