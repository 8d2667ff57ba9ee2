"""The interpreter of one chunk of blocks: scopes and variables, register arrays, expressions
and control flow (If, For under active masks). Memory accesses come from the mixins in
global_mem.py, shared.py, async_copy.py and vector.py (float4)."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ..numpy_ops import OPS, apply
from .async_copy import _AsyncCopies
from .errors import SimulationError
from .global_mem import _GlobalMemory
from .memory import _MBar, _Reg, _Shared
from .shared import _SharedMemory
from .vector import _VectorAccesses
from .values import (C_MINMAX, F32, I64, _BIN_ALIAS, _CALL_ALIAS, _INT_FNS, _LOGICAL_FNS, _NONE, _as_bool,
                     _binary_values, _cast, _cast_to, _dtype_of, _kind, _narrow, _own, _scalar, _unify)

MAX_LOOP_ITERATIONS = 10_000_000
_INT32_MAX = 2 ** 31 - 1


class _Chunk(_GlobalMemory, _SharedMemory, _AsyncCopies, _VectorAccesses):
    """The blocks b0 .. b0+nb-1 of one kernel launch, run together."""

    def __init__(self, k, buffers, params, scratch, stats, b0, nb, check_races):
        self.k, self.buffers, self.params, self.scratch = k, buffers, params, scratch
        self.stats, self.nb, self.check = stats, nb, check_races
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
        self.shared: dict[str, _Shared] = {}
        self.mbars: dict[str, _MBar] = {}
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
            K.GlobalStore: self.s_global_store, K.AtomicAdd: self.s_atomic_add,
            K.SharedStore: self.s_shared_store,
            K.VectorLoad: self.s_vector_load, K.VectorStore: self.s_vector_store,
            K.For: self.s_for, K.If: self.s_if, K.Barrier: self.s_barrier,
            K.CpAsync: self.s_cp_async, K.CpAsyncCommit: self.s_cp_commit,
            K.CpAsyncWait: self.s_cp_wait, K.TmaLoad: self.s_tma_load,
            K.TmaTensorLoad: self.s_tma_tensor_load,
            K.MbarrierInit: self.s_mbar_init, K.MbarrierWait: self.s_mbar_wait,
            K.MbarrierArrive: self.s_mbar_arrive, K.ProxyFence: self.s_proxy_fence,
            K.Comment: lambda s, mask: None, K.SyncWarp: lambda s, mask: None,    # lanes run in lockstep
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
        dt = _dtype_of(s.ctype)
        v = dt(0) if s.init is None else np.asarray(self.ev(s.init, mask))
        if s.ctype == "int" and self.k.index_bits == 32:
            self.check_index_range(s.name, v, mask)
        v = _cast(v, dt)
        self.scopes[-1][s.name] = [dt, _own(v)]

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
        self.scopes[-1][s.name] = _Reg(np.full((s.size,) + self.shape, s.init, dtype=_dtype_of(s.ctype)))

    def s_assign(self, s: K.Assign, mask):
        scope = self.lookup(s.name)
        entry = scope[s.name]
        value = self.ev(s.value, mask)
        if isinstance(entry, _Reg):
            if s.index is None:
                self.fail(f"assignment to register array {s.name} needs an index")
            self.reg_store(s.name, entry, self.ev_int(s.index, mask), _cast(value, entry.data.dtype), mask)
            return
        if s.index is not None:
            self.fail(f"{s.name} is a scalar register, not an array")
        self.set_var(entry, value, mask)

    def set_var(self, entry, value, mask):
        value = _cast(np.asarray(value), entry[0])
        if mask is None:
            entry[1] = _own(value)
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

    def reg_store(self, name, reg, idx, value, mask):
        self.reg_check(name, reg, idx, mask)
        i = _scalar(idx)
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
        return _cast(v, I64)

    def e_var(self, e: K.Var, mask):
        entry = self.lookup(e.name)[e.name]
        if isinstance(entry, _Reg):
            self.fail(f"register array {e.name} used as a scalar")
        return entry[1]

    def e_const(self, e: K.Const, mask):
        if e.ctype == "bool" or isinstance(e.value, bool):
            return np.bool_(e.value)
        return _dtype_of(e.ctype)(e.value)

    def e_cast(self, e: K.Cast, mask):
        return _cast_to(np.asarray(self.ev(e.a, mask)), e.ctype)

    def e_special(self, e: K.Special, mask):
        v = self.specials.get(e.name)
        if v is None:
            self.fail(f"unknown special value {e.name!r}")
        return v

    def e_binary(self, e: K.Binary, mask):
        op = _BIN_ALIAS.get(e.op, e.op)
        a = self.ev(e.a, mask)
        if op in ("&&", "||"):
            a = _as_bool(a)
            m = _narrow(mask, a if op == "&&" else ~a)
            if m is _NONE:
                return a
            b = _as_bool(self.ev(e.b, m))
            return (a & b) if op == "&&" else (a | b)
        return _binary_values(op, a, self.ev(e.b, mask))

    def e_unary(self, e: K.Unary, mask):
        a = self.ev(e.a, mask)
        if e.op in ("neg", "-"):
            return np.negative(_cast(a, I64) if a.dtype == np.bool_ else a)
        if e.op in ("not", "!"):
            return np.logical_not(a)
        if e.op in ("~", "invert"):
            return np.invert(a)
        if e.op in ("float", "to_float"):
            return _cast(a, F32)
        if e.op in ("int", "to_int"):
            return _cast(a, I64)
        return self.call(e.op, [a])

    def e_call(self, e: K.Call, mask):
        out = self.call(e.fn, [self.ev(a, mask) for a in e.args])
        if e.fn == "multiply" and _kind(out) == "f":        # float multiplies (a contraction's multiply-adds)
            self.stats.float_multiplies += self.count(mask)
        return out

    def call(self, fn, args):
        if fn in C_MINMAX:
            return C_MINMAX[fn](*(_cast(a, F32) for a in args))
        name = _CALL_ALIAS.get(fn, fn)
        if name not in OPS and name.endswith("f") and name[:-1] in OPS:
            name = name[:-1]                     # expf, sqrtf, tanhf, ... -> exp, sqrt, tanh
        name = _CALL_ALIAS.get(name, name)
        if name not in OPS:
            self.fail(f"unknown math function {fn!r}")
        if name == "where":
            c, a, b = args
            a, b = _unify(a, b)
            return np.where(_as_bool(c), a, b)
        if name in _LOGICAL_FNS:
            out = apply(name, [_as_bool(a) for a in args])
        elif name in _INT_FNS and all(_kind(a) in "iub" for a in args):
            out = apply(name, [_cast(a, I64) for a in args])
        else:
            out = apply(name, [_cast(a, F32) for a in args])
        if out.dtype == np.float64:
            out = out.astype(F32)
        return out

    def e_select(self, e: K.Select, mask):
        c = _as_bool(self.ev(e.cond, mask))
        s = _scalar(c)
        if s is not None:
            return self.ev(e.a if s else e.b, mask)
        ma, mb = _narrow(mask, c), _narrow(mask, ~c)
        if mb is _NONE or ma is _NONE:     # every active thread takes one side
            return self.ev(e.a if mb is _NONE else e.b, mask)
        a, b = _unify(self.ev(e.a, ma), self.ev(e.b, mb))
        return np.where(c, a, b)

    def e_reg_load(self, e: K.RegLoad, mask):
        entry = self.lookup(e.array)[e.array]
        if not isinstance(entry, _Reg):
            self.fail(f"{e.array} is not a register array")
        idx = self.ev_int(e.index, mask)
        self.reg_check(e.array, entry, idx, mask)
        i = _scalar(idx)
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
        c = _as_bool(self.ev(s.cond, mask))
        sc = _scalar(c)
        if sc is not None:
            branch = s.then if sc else s.orelse
            if branch:
                self.block(branch, mask)
            return
        mt = _narrow(mask, c)
        if mt is not _NONE and s.then:
            self.block(s.then, mt)
        if s.orelse:
            me = _narrow(mask, ~c)
            if me is not _NONE:
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
            st = _scalar(step)
            if st is not None:
                if st == 0:
                    self.fail(f"loop {s.var} has step 0")
                cond = (i < stop) if st > 0 else (i > stop)
            else:
                cond = np.where(step > 0, i < stop, i > stop)
            cur = _narrow(cur, cond)
            if cur is _NONE:
                break
            n += 1
            if n > MAX_LOOP_ITERATIONS:
                self.fail(f"loop {s.var} ran {MAX_LOOP_ITERATIONS} iterations (infinite loop?)")
            self.block(s.body, cur)
            step = self.ev_int(s.step, cur)
            self.set_var(entry, entry[1] + step, cur)
        self.scopes.pop()
