"""The interpreter of one chunk of blocks, one class: scopes and variables, register arrays,
expressions and control flow (If, For under active masks); global memory (bounds, alignment,
the write-write conflict check); shared memory (the race check against missing
barriers, bank wavefronts, asynchronous copies in flight); float4 accesses. The advanced
features' statements run in their own modules through FEATURE_STATEMENTS: cp.async groups
in sim/cp_async.py, TMA copies completing on mbarriers in sim/tma.py, the tensor cores'
ldmatrix and mma.sync in sim/mma.py (wgmma in sim/wgmma.py), the split-K tail's fence,
counter and broadcast in sim/split.py."""
from __future__ import annotations

import functools

import numpy as np

from ...ir import kernel_ir as K
from ...ir.types import ctype_bytes
from ..numpy_ops import OPS, apply
from .banks import wavefronts
from .cp_async import STATEMENTS as CP_ASYNC_STATEMENTS
from .cp_async import start as start_cp_async
from .errors import SimulationError
from .memory import RegArray, SharedState
from .mma import STATEMENTS as MMA_STATEMENTS
from .split import STATEMENTS as SPLIT_STATEMENTS
from .tma import STATEMENTS as TMA_STATEMENTS
from .tma import mbar_name, note_generic, watches_proxy
from .tma import start as start_tma
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
from .warp_roles import exec_roles
from .wgmma import STATEMENTS as WGMMA_STATEMENTS
from .wgmma import start as start_wgmma

MAX_LOOP_ITERATIONS = 10_000_000
_INT32_MAX = 2 ** 31 - 1


# The advanced features' statements, run by plain functions of their own modules that take
# the chunk as their first argument: the core's statements stay methods of Chunk, each
# feature's live beside it (sim/cp_async.py, tma.py, mma.py, wgmma.py, split.py), and each
# feature module's STATEMENTS table says which function runs which of its statements. (Tables,
# not mixins: a reader of a feature module sees every Chunk name it uses spelled `chunk.x`,
# and Chunk names no feature but here and at TMA's hooks: watches_proxy, note_generic, mbar_name.)
FEATURE_STATEMENTS = {**CP_ASYNC_STATEMENTS, **TMA_STATEMENTS, **MMA_STATEMENTS, **WGMMA_STATEMENTS,
                      **SPLIT_STATEMENTS}
# ... and the state those functions keep on the chunk, set up by their modules' `start`
FEATURE_STATE = (start_cp_async, start_tma, start_wgmma)


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
        self.tick = 0                # orders shared reads and mbarrier arrivals (ring releases)
        # ordinary stores not yet fenced before an async-proxy copy (kernels with TMA copies only)
        self.proxy_watch = watches_proxy(k)
        self.roles = None            # the warp-specialised split running (sim/warp_roles.py)
        for start in FEATURE_STATE:
            start(self)
        self.exec = {
            K.Declare: self.s_declare, K.DeclareArray: self.s_declare_array,
            K.Assign: self.s_assign, K.SharedArray: self.s_shared_array,
            K.GlobalStore: self.s_global_store,
            K.SharedStore: self.s_shared_store,
            K.VectorLoad: self.s_vector_load, K.VectorStore: self.s_vector_store,
            K.For: self.s_for, K.If: self.s_if, K.Barrier: self.s_barrier,
            K.Comment: lambda s, mask: None, K.SyncWarp: lambda s, mask: None,    # lanes run in lockstep
        }
        self.exec.update({node: functools.partial(run, self) for node, run in FEATURE_STATEMENTS.items()})
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
        dtype = np.uint32 if s.ctype == "b32" else dtype_of(s.ctype)      # b32: packed halves, as bits
        self.scopes[-1][s.name] = RegArray(np.full((s.size,) + self.shape, s.init, dtype=dtype))

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
        m, width = int(e.lane_mask), int(e.width)
        if not 0 <= m < 32 or (width and not (width <= 32 and 32 % width == 0 and m < width)):
            self.fail(f"Shuffle lane {m} (width {width}) is outside 0..31 or its group")
        # the source lane within the warp of each lane: lane ^ m, or lane m of its width-lane group
        lanes = np.arange(32)
        source = lanes // width * width + m if width else lanes ^ m
        what = f"lane {m} of {width}" if width else f"xor {m}"
        T = self.T
        if T % 32 or (mask is not None and mask.shape[-1] != 1):
            act = (np.ones((1, T), dtype=bool) if mask is None
                   else np.broadcast_to(mask, (mask.shape[0], T)))
            src = self.shuffle_perm(act, source, fill=False)
            bad = act & ~src
            if bad.any():
                r, t = (int(i[0]) for i in np.nonzero(bad))
                r = r if bad.shape[0] > 1 else 0
                self.fail(f"Shuffle({what}): thread {self.thread_index(t)} of block "
                          f"{self.block_index(r)} reads lane {source[t % 32]}, which is inactive "
                          f"or past the end of the block (undefined in CUDA)")
        if np.ndim(v) == 0 or v.shape[-1] == 1:
            return v            # the same value across the block's threads
        return self.shuffle_perm(v, source, fill=np.nan)

    def shuffle_perm(self, v, source, fill):
        """v as each lane of a warp reads it from lane source[lane] (an index array of 32)."""
        T = self.T
        pad = (-T) % 32
        if pad:
            v = np.concatenate([v, np.full((v.shape[0], pad), fill, dtype=v.dtype)], axis=1)
        w = v.reshape(v.shape[0], -1, 32)
        out = w[:, :, source].reshape(v.shape[0], -1)
        return out[:, :T] if pad else out

    # -- control flow -------------------------------------------------------------------------

    def s_if(self, s: K.If, mask):
        if s.roles:                     # producer and consumers, concurrently
            return exec_roles(self, s, mask)
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

    def elem_bytes(self, name, buf) -> int:
        """Bytes of one element of global buffer `name` as the kernel declares it: a half
        buffer's values are held in float32 here but take 2 bytes on the device."""
        p = self.params.get(name)
        return ctype_bytes(p.ctype) if p is not None else buf.itemsize

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
        self.stats.load(e.buffer, self.count(mask) * self.elem_bytes(e.buffer, buf), self.count(mask))
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
        self.stats.global_bytes_stored += keys.size * n * self.elem_bytes(name, buf)
        self.stats.global_stores += keys.size

    def s_global_store(self, s: K.GlobalStore, mask):
        off = self.ev_int(s.offset, mask)
        self.global_write(s.buffer, "GlobalStore", off, [self.ev(s.value, mask)], mask)

    # -- shared memory ---------------------------------------------------------------

    def s_shared_array(self, s: K.SharedArray, mask):
        sh = self.shared.get(s.name)
        if sh is None:
            self.shared[s.name] = SharedState(s.name, int(s.size), self.nb, dtype_of(s.ctype), s.ctype)
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
                            f"a TmaLoad not yet completed (MbarrierWait on {mbar_name(self, -tag - 1)})")
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
        self.stats.shared_bytes_loaded += self.count(mask) * sh.elem_bytes * n
        if sh.elem_bytes == 2:       # halves: the 4-byte words (banks) they sit in
            fronts, phases = wavefronts(off // 2, max(n // 2, 1), mask, self.shape)
        else:
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
            note_generic(self, sh, keys, tids, n)
        self.stats.shared_bytes_stored += keys.size * sh.elem_bytes * n

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
            note_generic(self, sh, keys, np.broadcast_to(tids, (self.nb, tids.size)).reshape(-1), n)
        if pend_tag is not None:
            if sh.pend is None:
                sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
            for j in range(n):
                sh.pend[:, cols + j] = pend_tag[:, None]
            sh.has_pending = True
        self.stats.shared_bytes_stored += self.nb * cols.size * sh.elem_bytes * n

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

    # -- asynchronous copies in flight (cp.async: sim/cp_async.py; TMA and mbarriers: sim/tma.py) -----

    def mark_pending(self, sh, keys, n, tag):
        """Flat shared keys (+0..n-1) in flight in cp.async group tag[block] of their block."""
        if sh.pend is None:
            sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
        pf = sh.pend.reshape(-1)
        for j in range(n):
            pf[keys + j] = tag[(keys + j) // sh.size]
        sh.has_pending = True

    # -- float4 accesses -------------------------------------------------------------

    def s_vector_load(self, s: K.VectorLoad, mask):
        off = self.ev_int(s.offset, mask)
        if s.space == "global":
            buf = self.gbuf(s.source, "VectorLoad")
            off = self.check_bounds(off, 4, buf.size, mask, f"buffer {s.source}", "VectorLoad", align=4)
            vals = [cast(np.take(buf, off + j), F32) for j in range(4)]
            self.stats.load(s.source, self.count(mask) * 4 * self.elem_bytes(s.source, buf), self.count(mask))
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
