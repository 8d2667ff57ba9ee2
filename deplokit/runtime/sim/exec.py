"""The interpreter of one chunk of blocks, one class: scopes and variables, register arrays,
expressions and control flow (If, For under active masks); global memory (bounds, alignment,
the write-write conflict check); shared memory (the race check against missing
barriers, bank wavefronts); asynchronous copies (cp.async groups, TMA copies completing on
mbarriers: arrivals, transaction bytes, phases, the ring protocol's checks; the data lands
immediately and is marked in flight in the shared array's table); float4 accesses."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ...ir.fragments import SHAPES as MMA_SHAPES
from ...ir.swizzle import REPEAT, swizzle_word
from ..numpy_ops import OPS, apply
from ..tensor_map import box_values
from ..warp_mma import ldmatrix, mma_sync, tf32_round
from .banks import wavefronts
from .errors import SimulationError
from .memory import MBarState, RegArray, SharedState
from .values import (
    BIN_ALIAS,
    C_MINMAX,
    CALL_ALIAS,
    F32,
    I64,
    INT_FNS,
    LOGICAL_FNS,
    NO_THREADS,
    as_bool,
    binary_values,
    cast,
    cast_to,
    dtype_of,
    kind_of,
    last_per_key,
    narrow,
    owned,
    uniform_value,
    unify,
)

MAX_LOOP_ITERATIONS = 10_000_000
_INT32_MAX = 2 ** 31 - 1
MBAR_IDS = 1024                 # mbarriers (slots) a kernel may have: the in-flight tag's radix


class Chunk:
    """The blocks b0 .. b0+nb-1 of one kernel launch, run together."""

    def __init__(self, k, buffers, params, scratch, stats, b0, nb, check_races, reverse=False):
        self.k, self.buffers, self.params, self.scratch = k, buffers, params, scratch
        self.stats, self.nb, self.check = stats, nb, check_races
        self.reverse = reverse       # atomics arrive from the chunk's last block to its first
        bx, by, bz = k.block
        gx, gy, _ = k.grid
        self.T = T = bx * by * bz
        t = np.arange(T, dtype=I64).reshape(1, T)
        b = np.arange(b0, b0 + nb, dtype=I64).reshape(nb, 1)
        self.b0 = b0
        self.tid = t
        self.specials = {
            "tid.x": t % bx, "tid.y": (t // bx) % by, "tid.z": t // (bx * by),
            "bid.x": b % gx, "bid.y": (b // gx) % gy, "bid.z": b // (gx * gy),
            "lane": t % 32, "warp": t // 32,
            "bdim.x": I64(bx), "bdim.y": I64(by), "bdim.z": I64(bz),
            "gdim.x": I64(gx), "gdim.y": I64(gy), "gdim.z": I64(k.grid[2]),
            "nthreads": I64(T),
        }
        for axis in "xyz":
            self.specials[f"threadIdx.{axis}"] = self.specials[f"tid.{axis}"]
            self.specials[f"blockIdx.{axis}"] = self.specials[f"bid.{axis}"]
            self.specials[f"blockDim.{axis}"] = self.specials[f"bdim.{axis}"]
            self.specials[f"gridDim.{axis}"] = self.specials[f"gdim.{axis}"]
        self.shape = (nb, T)
        self.lanes = np.arange(nb * T, dtype=I64)          # flat lane id within the chunk
        self.rows = np.arange(nb, dtype=I64).reshape(nb, 1)
        self.scopes: list[dict] = []
        self.shared: dict[str, SharedState] = {}
        self.mbars: dict[str, MBarState] = {}
        self.tick = 0                # orders shared reads and mbarrier arrivals (ring releases)
        self.acquired = None         # (blocks, threads): the latest release tick each thread waited for
        # ordinary stores not yet fenced before an async-proxy copy (kernels with TMA copies only)
        self.proxy_watch = any(isinstance(s, K.TmaLoad) for s in K.walk_stmts(k.body))
        # per block (the commits of a key loop whose trip count depends on the block differ)
        self.cp_open = np.ones(nb, dtype=np.int32)          # id of the cp.async group being filled
        self.cp_committed = np.zeros(nb, dtype=np.int32)    # groups 1..cp_committed are committed
        self.exec = {
            K.Declare: self.s_declare, K.DeclareArray: self.s_declare_array,
            K.Assign: self.s_assign, K.SharedArray: self.s_shared_array,
            K.GlobalStore: self.s_global_store,
            K.SharedStore: self.s_shared_store,
            K.VectorLoad: self.s_vector_load, K.VectorStore: self.s_vector_store,
            K.For: self.s_for, K.If: self.s_if, K.Barrier: self.s_barrier,
            K.CpAsync: self.s_cp_async, K.CpAsyncCommit: self.s_cp_commit,
            K.CpAsyncWait: self.s_cp_wait, K.TmaLoad: self.s_tma_load,
            K.TmaTensorLoad: self.s_tma_tensor_load,
            K.MbarrierInit: self.s_mbar_init, K.MbarrierWait: self.s_mbar_wait,
            K.MbarrierArrive: self.s_mbar_arrive, K.ProxyFence: self.s_proxy_fence,
            K.ThreadFence: lambda s, mask: None,        # a store is visible to every block at once
            K.AtomicInc: self.s_atomic_inc, K.Broadcast: self.s_broadcast,
            K.Comment: lambda s, mask: None, K.SyncWarp: lambda s, mask: None,    # lanes run in lockstep
            K.LdMatrix: self.s_ldmatrix, K.Mma: self.s_mma, K.Tf32Round: self.s_tf32_round,
        }
        self.eval = {
            K.Var: self.e_var, K.Const: self.e_const, K.Cast: self.e_cast, K.Special: self.e_special,
            K.Binary: self.e_binary, K.Unary: self.e_unary, K.Call: self.e_call,
            K.Select: self.e_select, K.GlobalLoad: self.e_global_load,
            K.SharedLoad: self.e_shared_load, K.Shuffle: self.e_shuffle, K.RegLoad: self.e_reg_load,
        }

    # -- running ------------------------------------------------------------------------------

    def run(self):
        self.block(self.k.body, None)

    def block(self, stmts, mask):
        self.scopes.append({})
        ex = self.exec
        for s in stmts:
            fn = ex.get(type(s))
            if fn is None:
                self.fail(f"unknown statement {type(s).__name__}")
            fn(s, mask)
        self.stats.statements += len(stmts)
        self.scopes.pop()

    def fail(self, msg):
        raise SimulationError(f"kernel {self.k.name}: {msg}")

    def where(self, bad):
        """'block (x, y, z) thread (x, y, z)' of the first lane set in `bad`."""
        bad = np.broadcast_to(bad, self.shape)
        r, t = (int(i[0]) for i in np.nonzero(bad))
        return f"block {self.block_index(r)} thread {self.thread_index(t)}"

    def block_index(self, r):
        gx, gy, _ = self.k.grid
        b = self.b0 + r
        return (b % gx, (b // gx) % gy, b // (gx * gy))

    def thread_index(self, t):
        bx, by, _ = self.k.block
        return (t % bx, (t // bx) % by, t // (bx * by))

    def count(self, mask) -> int:
        if mask is None:
            return self.nb * self.T
        return int(np.count_nonzero(mask)) * (self.nb * self.T // mask.size)

    def full(self, v):
        return np.broadcast_to(v, self.shape)

    def active(self, v, mask):
        """The values of the active lanes, in lane order, as a 1-d array."""
        v = np.broadcast_to(v, self.shape)
        return v.reshape(-1) if mask is None else v[np.broadcast_to(mask, self.shape)]

    # -- variables ------------------------------------------------------------------------------

    def lookup(self, name):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope
        self.fail(f"variable {name!r} is used before it is declared")

    def s_declare(self, s: K.Declare, mask):
        dt = dtype_of(s.ctype)
        v = dt(0) if s.init is None else np.asarray(self.ev(s.init, mask))
        if s.ctype == "int" and self.k.index_bits == 32:
            self.check_index_range(s.name, v, mask)
        v = cast(v, dt)
        self.scopes[-1][s.name] = [dt, owned(v)]

    def check_index_range(self, name, v, mask):
        """A 32-bit kernel's index variable must hold its value in an int: one that does not
        would wrap on a GPU (k001 stamps index_bits=64 on kernels that need more)."""
        if v.dtype.kind not in "iu" or not v.size:
            return
        if int(v.max()) <= _INT32_MAX and int(v.min()) >= -_INT32_MAX - 1:
            return
        bad = (v > _INT32_MAX) | (v < -_INT32_MAX - 1)
        if mask is not None:
            bad = bad & mask
        if np.any(bad):
            i = int(np.broadcast_to(v, self.shape)[np.broadcast_to(bad, self.shape)][0])
            self.fail(f"index variable {name} = {i} overflows the kernel's 32-bit index arithmetic "
                      f"({self.where(bad)})")

    def s_declare_array(self, s: K.DeclareArray, mask):
        self.scopes[-1][s.name] = RegArray(np.full((s.size,) + self.shape, s.init, dtype=dtype_of(s.ctype)))

    def s_assign(self, s: K.Assign, mask):
        scope = self.lookup(s.name)
        entry = scope[s.name]
        value = self.ev(s.value, mask)
        if isinstance(entry, RegArray):
            if s.index is None:
                self.fail(f"assignment to register array {s.name} needs an index")
            self.reg_store(s.name, entry, self.ev_int(s.index, mask), cast(value, entry.data.dtype), mask)
            return
        if s.index is not None:
            self.fail(f"{s.name} is a scalar register, not an array")
        self.set_var(entry, value, mask)

    def set_var(self, entry, value, mask):
        value = cast(np.asarray(value), entry[0])
        if mask is None:
            entry[1] = owned(value)
        else:
            entry[1] = np.where(mask, value, entry[1])

    def reg_check(self, name, reg, idx, mask):
        size = reg.data.shape[0]
        bad = (idx < 0) | (idx >= size)
        if mask is not None:
            bad = bad & mask
        if np.any(bad):
            i = int(np.broadcast_to(idx, self.shape)[np.broadcast_to(bad, self.shape)][0])
            self.fail(f"register array {name}[{size}] indexed at {i} by {self.where(bad)}")

    # -- tensor cores: warp-wide instructions with PTX's lane maps (runtime/warp_mma.py) --------

    def whole_warps(self, mask, what):
        """(warps, 32) of the block: a warp-wide instruction needs every lane of every warp."""
        if self.T % 32:
            self.fail(f"{what} needs whole warps; the block has {self.T} threads")
        if mask is not None and not np.broadcast_to(mask, self.shape).all():
            idle = ~np.broadcast_to(mask, self.shape)
            self.fail(f"{what} executed by only some lanes of a warp ({self.where(idle)} skips it)")
        return self.T // 32

    def reg_array(self, name, what) -> RegArray:
        entry = self.lookup(name)[name]
        if not isinstance(entry, RegArray):
            self.fail(f"{what}: {name} is not a register array")
        return entry

    def reg_run(self, name, at, n, mask, what):
        """Register array `name`'s elements at .. at+n-1 (at the same for every thread) as
        (blocks, warps, 32, n), and the array and first index."""
        reg = self.reg_array(name, what)
        i = uniform_value(self.ev_int(at, mask))
        if i is None or not 0 <= i <= reg.data.shape[0] - n:
            self.fail(f"{what}: {name}[{i} +{n}] is not a fixed run of its {reg.data.shape[0]} registers")
        run = np.moveaxis(np.broadcast_to(reg.data[i:i + n], (n,) + self.shape), 0, -1)
        return run.reshape(self.nb, self.T // 32, 32, n), reg, i

    def s_ldmatrix(self, s: K.LdMatrix, mask):
        w = self.whole_warps(mask, "ldmatrix")
        sh = self.sarr(s.array, "LdMatrix")
        if sh.data.dtype != np.float32:
            self.fail(f"ldmatrix from {s.array}: only 32-bit words are simulated (tf32 fragments)")
        off = np.broadcast_to(self.ev_int(s.offset, mask), self.shape)
        rows = np.stack([np.broadcast_to(v, self.shape) for v in self.shared_read(sh, off, 4, mask, "LdMatrix")], -1)
        got = ldmatrix(rows.reshape(self.nb, w, 32, 4), s.num, s.trans)       # (nb, w, 32, num, 1)
        reg = self.reg_array(s.dst, "ldmatrix")
        i = uniform_value(self.ev_int(s.index, mask))
        if i is None or not 0 <= i <= reg.data.shape[0] - s.num:
            self.fail(f"ldmatrix into {s.dst}[{i} +{s.num}]: not a fixed run of its registers")
        reg.data[i:i + s.num] = np.moveaxis(got.reshape(self.nb, self.T, s.num), -1, 0)

    def s_tf32_round(self, s: K.Tf32Round, mask):
        reg = self.reg_array(s.dst, "cvt.rna.tf32.f32")
        idx = self.ev_int(s.index, mask)
        self.reg_store(s.dst, reg, idx, tf32_round(self.e_reg_load(K.RegLoad(s.dst, s.index), mask)), mask)

    def s_mma(self, s: K.Mma, mask):
        self.whole_warps(mask, "mma.sync")
        shape = MMA_SHAPES.get(s.shape)
        if shape is None:
            self.fail(f"unknown mma shape {s.shape!r}")
        a, _, _ = self.reg_run(s.a, s.a_at, shape.elements("A"), mask, "mma.sync A")
        b, _, _ = self.reg_run(s.b, s.b_at, shape.elements("B"), mask, "mma.sync B")
        c, reg, i = self.reg_run(s.acc, s.acc_at, 4, mask, "mma.sync C")
        d = mma_sync(shape, a, b, c)
        reg.data[i:i + 4] = np.moveaxis(d.reshape(self.nb, self.T, 4), -1, 0)
        self.stats.float_multiplies += self.nb * (self.T // 32) * shape.m * shape.n * shape.k

    def reg_store(self, name, reg, idx, value, mask):
        self.reg_check(name, reg, idx, mask)
        i = uniform_value(idx)
        if i is not None:
            if mask is None:
                reg.data[i][...] = value
            else:
                np.copyto(reg.data[i], value, where=np.broadcast_to(mask, self.shape))
            return
        act = None if mask is None else np.broadcast_to(mask, self.shape)
        I = np.broadcast_to(idx, self.shape)
        R = np.broadcast_to(self.rows, self.shape)
        C = np.broadcast_to(self.tid, self.shape)
        V = np.broadcast_to(value, self.shape)
        if act is None:
            reg.data[I, R, C] = V
        else:
            reg.data[I[act], R[act], C[act]] = V[act]

    # -- expressions ------------------------------------------------------------------------------

    def ev(self, e, mask):
        fn = self.eval.get(type(e))
        if fn is None:
            self.fail(f"unknown expression {type(e).__name__}")
        return fn(e, mask)

    def ev_int(self, e, mask):
        v = self.ev(e, mask)
        if v.dtype.kind == "f":
            self.fail(f"offset/index {e} is a float expression")
        return cast(v, I64)

    def e_var(self, e: K.Var, mask):
        entry = self.lookup(e.name)[e.name]
        if isinstance(entry, RegArray):
            self.fail(f"register array {e.name} used as a scalar")
        return entry[1]

    def e_const(self, e: K.Const, mask):
        if e.ctype == "bool" or isinstance(e.value, bool):
            return np.bool_(e.value)
        return dtype_of(e.ctype)(e.value)

    def e_cast(self, e: K.Cast, mask):
        return cast_to(np.asarray(self.ev(e.a, mask)), e.ctype)

    def e_special(self, e: K.Special, mask):
        v = self.specials.get(e.name)
        if v is None:
            self.fail(f"unknown special value {e.name!r}")
        return v

    def e_binary(self, e: K.Binary, mask):
        op = BIN_ALIAS.get(e.op, e.op)
        a = self.ev(e.a, mask)
        if op in ("&&", "||"):
            a = as_bool(a)
            m = narrow(mask, a if op == "&&" else ~a)
            if m is NO_THREADS:
                return a
            b = as_bool(self.ev(e.b, m))
            return (a & b) if op == "&&" else (a | b)
        return binary_values(op, a, self.ev(e.b, mask))

    def e_unary(self, e: K.Unary, mask):
        a = self.ev(e.a, mask)
        if e.op in ("neg", "-"):
            return np.negative(cast(a, I64) if a.dtype == np.bool_ else a)
        if e.op in ("not", "!"):
            return np.logical_not(a)
        if e.op in ("~", "invert"):
            return np.invert(a)
        if e.op in ("float", "to_float"):
            return cast(a, F32)
        if e.op in ("int", "to_int"):
            return cast(a, I64)
        return self.call(e.op, [a])

    def e_call(self, e: K.Call, mask):
        out = self.call(e.fn, [self.ev(a, mask) for a in e.args])
        if e.fn == "multiply" and kind_of(out) == "f":        # float multiplies (a contraction's multiply-adds)
            self.stats.float_multiplies += self.count(mask)
        return out

    def call(self, fn, args):
        if fn in C_MINMAX:
            return C_MINMAX[fn](*(cast(a, F32) for a in args))
        name = CALL_ALIAS.get(fn, fn)
        if name not in OPS and name.endswith("f") and name[:-1] in OPS:
            name = name[:-1]                     # expf, sqrtf, tanhf, ... -> exp, sqrt, tanh
        name = CALL_ALIAS.get(name, name)
        if name not in OPS:
            self.fail(f"unknown math function {fn!r}")
        if name == "where":
            c, a, b = args
            a, b = unify(a, b)
            return np.where(as_bool(c), a, b)
        if name in LOGICAL_FNS:
            out = apply(name, [as_bool(a) for a in args])
        elif name in INT_FNS and all(kind_of(a) in "iub" for a in args):
            out = apply(name, [cast(a, I64) for a in args])
        else:
            out = apply(name, [cast(a, F32) for a in args])
        if out.dtype == np.float64:
            out = out.astype(F32)
        return out

    def e_select(self, e: K.Select, mask):
        c = as_bool(self.ev(e.cond, mask))
        s = uniform_value(c)
        if s is not None:
            return self.ev(e.a if s else e.b, mask)
        ma, mb = narrow(mask, c), narrow(mask, ~c)
        if mb is NO_THREADS or ma is NO_THREADS:     # every active thread takes one side
            return self.ev(e.a if mb is NO_THREADS else e.b, mask)
        a, b = unify(self.ev(e.a, ma), self.ev(e.b, mb))
        return np.where(c, a, b)

    def e_reg_load(self, e: K.RegLoad, mask):
        entry = self.lookup(e.array)[e.array]
        if not isinstance(entry, RegArray):
            self.fail(f"{e.array} is not a register array")
        idx = self.ev_int(e.index, mask)
        self.reg_check(e.array, entry, idx, mask)
        i = uniform_value(idx)
        if i is not None:
            return entry.data[i]
        if mask is not None:
            idx = np.where(mask, idx, 0)
        I = np.broadcast_to(idx, self.shape)
        return entry.data[I, np.broadcast_to(self.rows, self.shape), np.broadcast_to(self.tid, self.shape)]

    def e_shuffle(self, e: K.Shuffle, mask):
        v = self.ev(e.value, mask)
        m = int(e.lane_mask)
        if not 0 <= m < 32:
            self.fail(f"Shuffle lane mask {m} is outside 0..31")
        T = self.T
        if T % 32 or (mask is not None and mask.shape[-1] != 1):
            act = (np.ones((1, T), dtype=bool) if mask is None
                   else np.broadcast_to(mask, (mask.shape[0], T)))
            src = self.shuffle_perm(act, m, fill=False)
            bad = act & ~src
            if bad.any():
                r, t = (int(i[0]) for i in np.nonzero(bad))
                r = r if bad.shape[0] > 1 else 0
                self.fail(f"Shuffle(xor {m}): thread {self.thread_index(t)} of block "
                          f"{self.block_index(r)} reads lane {(t % 32) ^ m}, which is inactive "
                          f"or past the end of the block (undefined in CUDA)")
        if np.ndim(v) == 0 or v.shape[-1] == 1:
            return v            # the same value across the block's threads
        return self.shuffle_perm(v, m, fill=np.nan)

    def shuffle_perm(self, v, m, fill):
        T = self.T
        pad = (-T) % 32
        if pad:
            v = np.concatenate([v, np.full((v.shape[0], pad), fill, dtype=v.dtype)], axis=1)
        w = v.reshape(v.shape[0], -1, 32)
        out = w[:, :, np.arange(32) ^ m].reshape(v.shape[0], -1)
        return out[:, :T] if pad else out

    # -- control flow -------------------------------------------------------------------------

    def s_if(self, s: K.If, mask):
        c = as_bool(self.ev(s.cond, mask))
        sc = uniform_value(c)
        if sc is not None:
            branch = s.then if sc else s.orelse
            if branch:
                self.block(branch, mask)
            return
        mt = narrow(mask, c)
        if mt is not NO_THREADS and s.then:
            self.block(s.then, mt)
        if s.orelse:
            me = narrow(mask, ~c)
            if me is not NO_THREADS:
                self.block(s.orelse, me)

    def s_for(self, s: K.For, mask):
        start = self.ev_int(s.start, mask)
        self.scopes.append({s.var: [I64, start]})
        entry = self.scopes[-1][s.var]
        cur = mask
        n = 0
        while True:
            i = entry[1]
            stop = self.ev_int(s.stop, cur)
            step = self.ev_int(s.step, cur)
            st = uniform_value(step)
            if st is not None:
                if st == 0:
                    self.fail(f"loop {s.var} has step 0")
                cond = (i < stop) if st > 0 else (i > stop)
            else:
                cond = np.where(step > 0, i < stop, i > stop)
            cur = narrow(cur, cond)
            if cur is NO_THREADS:
                break
            n += 1
            if n > MAX_LOOP_ITERATIONS:
                self.fail(f"loop {s.var} ran {MAX_LOOP_ITERATIONS} iterations (infinite loop?)")
            self.block(s.body, cur)
            step = self.ev_int(s.step, cur)
            self.set_var(entry, entry[1] + step, cur)
        self.scopes.pop()

    # -- global memory ---------------------------------------------------------------

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
        return cast(v, dtype_of(e.ctype))

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
        vals = [cast(self.active(v, mask), buf.dtype) for v in values]
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
                win = last_per_key(keys)          # highest lane wins, deterministically
                for j, v in enumerate(vals):
                    buf[keys[win] + j] = v[win]
        self.stats.global_bytes_stored += keys.size * n * buf.itemsize
        self.stats.global_stores += keys.size

    def s_global_store(self, s: K.GlobalStore, mask):
        off = self.ev_int(s.offset, mask)
        self.global_write(s.buffer, "GlobalStore", off, [self.ev(s.value, mask)], mask)

    def s_atomic_inc(self, s: K.AtomicInc, mask):
        """atomicAdd(&buffer[offset], 1) by every active lane, one after another in the order
        the blocks arrive (lane order, or the chunk's blocks last to first when `reverse`);
        each lane's `dst` is the count before its own increment."""
        buf = self.gbuf(s.buffer, "AtomicInc")
        if self.params[s.buffer].const:
            self.fail(f"AtomicInc on read-only parameter {s.buffer}")
        off = self.check_bounds(self.ev_int(s.offset, mask), 1, buf.size, mask, f"buffer {s.buffer}", "AtomicInc")
        live = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        offs = np.broadcast_to(off, self.shape)
        old = np.zeros(self.shape, dtype=I64)
        rows = range(self.nb - 1, -1, -1) if self.reverse else range(self.nb)
        for r in rows:
            for t in np.nonzero(live[r])[0]:
                o = int(offs[r, t])
                old[r, t] = int(buf[o])
                buf[o] += 1
        self.stats.global_loads += int(live.sum())
        self.scopes[-1][s.dst] = [dtype_of("int"), old]

    def s_broadcast(self, s: K.Broadcast, mask):
        sh = self.sarr(s.array, "Broadcast")
        value = self.shared_read(sh, np.zeros((1, 1), dtype=I64), 1, mask, "Broadcast")[0]
        self.scopes[-1][s.dst] = [dtype_of("int"), owned(cast(np.asarray(value), dtype_of("int")))]

    # -- shared memory ---------------------------------------------------------------

    def s_shared_array(self, s: K.SharedArray, mask):
        sh = self.shared.get(s.name)
        if sh is None:
            self.shared[s.name] = SharedState(s.name, int(s.size), self.nb, dtype_of(s.ctype))
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

    def shared_read(self, sh: SharedState, off, n, mask, kind):
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

    def fold_reads(self, sh: SharedState):
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

    def shared_write(self, sh: SharedState, off, values, mask, kind, align=1, pend_tag=None):
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
        vals = [cast(self.active(v, mask), sh.data.dtype) for v in values]
        if sh.scratch is None:
            sh.scratch = np.empty(sh.flat.size, dtype=I64)
        sh.scratch[keys] = lanes
        dup = sh.scratch[keys] != lanes
        if dup.any():
            if self.check:
                i = int(np.nonzero(dup)[0][0])
                a, b = int(lanes[i]), int(sh.scratch[keys[i]])
                self.conflict(sh, kind, b % self.T, a % self.T, a // self.T, int(keys[i]) % sh.size)
            win = last_per_key(keys)              # highest thread id wins, deterministically
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

    def shared_write_cols(self, sh: SharedState, off, values, mask, kind, pend_tag):
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
            v = cast(np.asarray(v), sh.data.dtype)
            if np.ndim(v) == 0:
                vals.append(v)
            else:
                v = np.broadcast_to(v, (v.shape[0], T))
                vals.append(v if act is None else v[:, act])
        if np.unique(cols).size != cols.size:
            win = last_per_key(cols)           # highest thread id wins, deterministically
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

    # -- asynchronous copies: cp.async, TMA, mbarriers -------------------------------

    def s_cp_async(self, s: K.CpAsync, mask):
        if s.nbytes not in (4, 8, 16):
            self.fail(f"cp.async of {s.nbytes} bytes (must be 4, 8 or 16)")
        n = s.nbytes // 4
        buf = self.gbuf(s.buffer, "CpAsync")
        src = self.check_bounds(self.ev_int(s.src_offset, mask), n, buf.size, mask,
                                f"buffer {s.buffer}", "CpAsync", align=n)
        vals = [cast(np.take(buf, src + j), F32) for j in range(n)]
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
        self._land(sh, "TmaLoad", s.expect, mb, rows, tids, sl, keys, cast(buf[src[:, None] + span], F32))

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
            self.fail(
                f"tensor map {tmap.name} describes {tmap.buffer} as {tmap.shape}, but it holds {buf.size} elements"
            )
        sh = self.sarr(s.array, "TmaTensorLoad")
        n = tmap.box_bytes // 4
        line = max(128, REPEAT[tmap.swizzle])          # where a box (and its swizzle pattern) may start
        dst = self.check_bounds(self.ev_int(s.dst_offset, mask), n, sh.size, mask,
                                f"shared array {sh.name}", "TmaTensorLoad", align=line // 4)
        dst = np.broadcast_to(dst, self.shape)[rows, tids]
        origins = np.stack([np.broadcast_to(self.ev_int(c, mask), self.shape)[rows, tids] for c in s.coords], axis=1)
        values = cast(box_values(buf, tmap.shape, tmap.box, origins), F32)
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
            self.mbars[s.name] = MBarState(base, s.name, int(s.count), int(s.slots), self.nb, self.T)
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

    def mbar(self, name, kind) -> MBarState:
        mb = self.mbars.get(name)
        if mb is None:
            self.fail(f"{kind} on mbarrier {name!r}, which is not initialised (MbarrierInit)")
        return mb

    def mbar_threads(self, mb: MBarState, slot, mask, kind):
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

    def mbar_arrive(self, mb: MBarState, rows, tids, sl, expect_tx=0):
        self.tick += 1
        np.add.at(mb.arrived, (rows, sl), 1)
        if expect_tx:
            np.add.at(mb.tx, (rows, sl), int(expect_tx))
        mb.who[rows, sl, tids] = True
        first = mb.first[rows, sl]
        mb.first[rows, sl] = np.where(first < 0, self.tick, first)
        self.mbar_complete(mb, rows, sl)

    def mbar_complete(self, mb: MBarState, rows, sl):
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

    # -- float4 accesses -------------------------------------------------------------

    def s_vector_load(self, s: K.VectorLoad, mask):
        off = self.ev_int(s.offset, mask)
        if s.space == "global":
            buf = self.gbuf(s.source, "VectorLoad")
            off = self.check_bounds(off, 4, buf.size, mask, f"buffer {s.source}", "VectorLoad", align=4)
            vals = [cast(np.take(buf, off + j), F32) for j in range(4)]
            self.stats.global_bytes_loaded += self.count(mask) * 16
            self.stats.global_loads += self.count(mask)
        elif s.space == "shared":
            vals = self.shared_read(self.sarr(s.source, "VectorLoad"), off, 4, mask, "VectorLoad")
        else:
            self.fail(f"VectorLoad from unknown space {s.space!r}")
        for name, v in zip(s.dsts, vals):
            scope = None
            for sc in reversed(self.scopes):
                if name in sc:
                    scope = sc
                    break
            if scope is None:       # not declared yet: a fresh float register here
                self.scopes[-1][name] = [F32, owned(v)]
            else:
                self.set_var(scope[name], v, mask)

    def s_vector_store(self, s: K.VectorStore, mask):
        off = self.ev_int(s.offset, mask)
        values = [self.ev(v, mask) for v in s.values]
        if s.space == "global":
            self.global_write(s.target, "VectorStore", off, values, mask, align=4)
        elif s.space == "shared":
            self.shared_write(self.sarr(s.target, "VectorStore"), off, values, mask, "VectorStore", align=4)
        else:
            self.fail(f"VectorStore to unknown space {s.space!r}")
