"""SIMT simulator for Kernel IR: every thread of every block, executed with numpy.

Threads run in lockstep. A per-thread value is a numpy array laid out over
(blocks of the current chunk, threads of a block), kept in its *smallest broadcast shape*:
a constant is 0-d, threadIdx is (1, T), blockIdx is (nb, 1), and only values that depend on
both are (nb, T). Blocks run in chunks of at most `max_threads_in_flight` thread-lanes.

Control flow runs under an *active mask* (None = every thread of the chunk; otherwise a bool
array in broadcast shape). `If` with a per-thread condition runs both sides, each under
`mask & cond` / `mask & ~cond` (masks compose when nested); a condition that is the same for
every active thread runs one side under the unchanged mask. `For` re-tests `var < stop` for
every active thread at each iteration; a thread whose own test fails leaves the loop (its
lane drops out of the mask) and the loop ends when no active thread is left, so a uniform
loop is a plain loop. `&&`, `||` and `Select` evaluate their right-hand / unchosen operands
only under the narrowed mask, like C short-circuiting, so a guarded load never faults.
Assignments change active threads only (np.where with the mask). Every `{ }` (kernel body,
If branch, each loop iteration) opens a lexical scope: a Declare shadows outer names and
vanishes at the end of its block.

Hazards are reported, never silently tolerated, as SimulationError (a DeplokitError):
  * out-of-range global / shared / register-array offsets of an active thread;
  * a store to a read-only (const) parameter;
  * a write-write conflict inside one statement: two active threads of a block storing to
    the same shared element, or two threads storing *different* values to one global
    element (same value is allowed). With check_races=False the conflict is resolved
    deterministically: the highest flat lane wins (as if threads stored in order).
    AtomicAdd is not a conflict: every thread's add lands, applied in lane order, block
    after block (np.add.at), so split-K partial sums add up deterministically;
  * missing __syncthreads (check_races=True, default): per shared array and element, the
    thread that last wrote it since the last Barrier (int32 array, -1 = none, reset at each
    Barrier) and, lazily, the thread that read it (-2 = several threads). A read of an
    element another thread wrote (RAW), a write over another thread's write (WAW) or over
    an element another thread read (WAR) with no Barrier between -> SimulationError. The
    reader table is only built when a write follows reads in the same barrier interval, so
    correct kernels pay for a log append per read;
  * a Barrier reached by only part of a block (divergent control flow);
  * a Shuffle whose source lane is inactive (undefined in CUDA) or outside the block;
  * reading shared data whose cp.async group has not been waited for (CpAsyncCommit closes
    a group, CpAsyncWait(n) completes all committed groups but the newest n), or whose TMA
    load has not completed (MbarrierWait on its barrier, waiting for the right phase
    parity; a wait with no TMA in flight would deadlock and is reported);
  * float4 (VectorLoad/VectorStore) offsets that are not 16-byte aligned, cp.async offsets
    not aligned to their size, TMA offsets/counts not multiples of 16 bytes.

Data model: cp.async copies immediately (it counts as a write by the issuing thread for the
race check) but is marked in flight until waited for; a TMA load copies immediately (checked
at issue against other threads' unsynchronised accesses, like a write by its issuer) and
becomes visible to every thread at the MbarrierWait that completes it. Shared memory starts
as NaN (garbage in CUDA). Register arrays are stored as (size, blocks, threads).

Arithmetic: int is int64 (`/` truncates toward zero as in C, `//` floors, `%` is C's
remainder), float is float32 (never widened to float64; int operands are converted),
`Call.fn` is a deplokit elementwise op name (numpy_ops), C spellings like expf / fmaxf are
accepted too. Known limits: write-write conflicts across different statements or across
chunks are not detected; cp.async groups are per chunk, not per thread."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..errors import DeplokitError
from ..ir import kernel_ir as K
from .numpy_ops import OPS, apply

F32 = np.float32
I64 = np.int64
MAX_THREADS_IN_FLIGHT = 1 << 20
MAX_LOOP_ITERATIONS = 10_000_000

_NONE = object()   # an empty mask: no thread active


class SimulationError(DeplokitError):
    """The simulated kernel did something invalid: an out-of-bounds access, a race, a
    divergent barrier, a misaligned vector access, ..."""


@dataclass
class SimStats:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    blocks: int = 0
    threads: int = 0                # threads launched (blocks * threads per block)
    chunks: int = 0
    statements: int = 0             # statements executed (once per chunk, not per thread)
    barriers: int = 0               # block-level __syncthreads executed
    global_bytes_loaded: int = 0    # by active threads
    global_bytes_stored: int = 0
    shared_bytes_loaded: int = 0
    shared_bytes_stored: int = 0


# -- helpers ----------------------------------------------------------------------------------

def _dtype_of(ctype: str):
    if ctype == "bool":
        return np.bool_
    if "int" in ctype or ctype in ("long", "size_t", "unsigned"):
        return I64
    return F32


def _cast(v, dtype):
    if v.dtype != dtype:
        with np.errstate(invalid="ignore"):
            return v.astype(dtype)
    return v


def _own(v):
    """A copy when v is a view into mutable storage (register arrays), so that later in-place
    updates of that storage cannot change the variable."""
    if isinstance(v, np.ndarray) and not v.flags.owndata:
        return v.copy()
    return v


def _kind(v) -> str:
    return v.dtype.kind     # f, i/u, b


def _scalar(v):
    """The Python value of v if it is the same for every thread (0-d or size 1), else None."""
    if np.ndim(v) == 0:
        return v.item() if isinstance(v, np.ndarray) else v
    if v.size == 1:
        return v.reshape(()).item()
    return None


def _as_bool(v):
    return v if v.dtype == np.bool_ else (v != 0)


def _narrow(mask, c):
    """The mask of active threads for which c holds: None (all of the chunk), an array,
    the same mask object when c holds for every active thread, or _NONE."""
    s = _scalar(c)
    if s is not None:
        return mask if s else _NONE
    c = _as_bool(c)
    if mask is None:
        if c.all():
            return None
        return c if c.any() else _NONE
    m = mask & c
    if not m.any():
        return _NONE
    if not (mask & ~c).any():
        return mask
    return m


def _unify(a, b):
    ka, kb = _kind(a), _kind(b)
    if ka == kb:
        return a, b
    if "f" in (ka, kb):
        return _cast(a, F32), _cast(b, F32)
    return _cast(a, I64), _cast(b, I64)


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}
_BIN_ALIAS = {"add": "+", "subtract": "-", "sub": "-", "multiply": "*", "mul": "*",
              "divide": "/", "div": "/", "mod": "%", "floordiv": "//", "maximum": "max",
              "minimum": "min", "fmaxf": "max", "fminf": "min", "less": "<",
              "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
              "not_equal": "!=", "logical_and": "&&", "logical_or": "||", "and": "&&",
              "or": "||"}
_CALL_ALIAS = {"fmaxf": "maximum", "fminf": "minimum", "fmax": "maximum", "fmin": "minimum",
               "max": "maximum", "min": "minimum", "fabs": "abs", "fabsf": "abs",
               "powf": "pow", "rcp": "reciprocal", "__expf": "exp", "__logf": "log",
               "select": "where"}
_LOGICAL_FNS = {"logical_not", "logical_and", "logical_or"}
# ops that stay in int64 when every operand is int or bool (index arithmetic spelled as calls)
_INT_FNS = {"add", "subtract", "multiply", "maximum", "minimum", "greater", "less",
            "greater_equal", "less_equal", "equal", "not_equal", "neg", "abs"}


def _c_div(a, b):
    q = np.floor_divide(a, b)
    neg = q < 0
    if np.any(neg):   # signs differ: C truncates toward zero
        q = q + (neg & (a - q * b != 0))
    return q


def _binary_values(op, a, b):
    if op in _CMP:
        a, b = _unify(a, b)
        return _CMP[op](a, b)
    ka, kb = _kind(a), _kind(b)
    if ka == "f" or kb == "f":
        a, b = _cast(a, F32), _cast(b, F32)
        if op == "+":
            return np.add(a, b)
        if op == "-":
            return np.subtract(a, b)
        if op == "*":
            return np.multiply(a, b)
        if op == "/":
            return np.divide(a, b)
        if op == "min":
            return np.minimum(a, b)
        if op == "max":
            return np.maximum(a, b)
        if op == "%":
            return np.fmod(a, b)
        if op == "//":
            return np.floor(np.divide(a, b))
        if op in ("pow", "**"):
            return np.power(a, b)
        raise SimulationError(f"operator {op!r} is not defined on float operands")
    if ka == "b" and kb == "b" and op in ("&", "|", "^"):
        return {"&": np.logical_and, "|": np.logical_or, "^": np.logical_xor}[op](a, b)
    a, b = _cast(a, I64), _cast(b, I64)
    if op == "+":
        return np.add(a, b)
    if op == "-":
        return np.subtract(a, b)
    if op == "*":
        return np.multiply(a, b)
    if op == "/":
        return _c_div(a, b)
    if op == "//":
        return np.floor_divide(a, b)
    if op == "%":
        return np.fmod(a, b)
    if op == "min":
        return np.minimum(a, b)
    if op == "max":
        return np.maximum(a, b)
    if op == "&":
        return np.bitwise_and(a, b)
    if op == "|":
        return np.bitwise_or(a, b)
    if op == "^":
        return np.bitwise_xor(a, b)
    if op == "<<":
        return np.left_shift(a, b)
    if op == ">>":
        return np.right_shift(a, b)
    if op in ("pow", "**"):
        return np.power(a, b)
    raise SimulationError(f"unknown binary operator {op!r}")


class _Reg:
    """A per-thread register array, stored as (size, blocks, threads)."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class _Shared:
    __slots__ = ("name", "size", "data", "flat", "lw", "dirty", "lr", "lr_dirty", "reads",
                 "pend", "has_pending", "scratch")

    def __init__(self, name, size, nb):
        self.name, self.size = name, size
        self.data = np.full((nb, size), np.nan, dtype=F32)   # garbage until written
        self.flat = self.data.reshape(-1)
        self.lw = None          # (nb, size) int32 last writer since the last barrier, -1 none
        self.dirty = False      # any write since the last barrier
        self.lr = None          # (nb, size) int32 reader since the last barrier, -2 several
        self.lr_dirty = False
        self.reads = []         # logged reads not yet folded into lr: (offset, mask, n)
        self.pend = None        # (nb, size) int32: >0 cp.async group, <0 -(mbarrier id + 1)
        self.has_pending = False
        self.scratch = None     # (nb * size,) int64: duplicate-address detection


class _MBar:
    __slots__ = ("id", "count", "phase", "inflight")

    def __init__(self, ident, count, nb):
        self.id, self.count = ident, count
        self.phase = np.zeros(nb, dtype=I64)
        self.inflight = np.zeros(nb, dtype=bool)


# -- the simulator ----------------------------------------------------------------------------

def simulate_kernel(k: K.KernelFunc, buffers: dict[str, np.ndarray], *,
                    max_threads_in_flight: int = MAX_THREADS_IN_FLIGHT,
                    check_races: bool = True, max_block_threads: int | None = None) -> SimStats:
    """Run every thread of every block of `k` over `buffers` (param name -> flat numpy array;
    float32, or int64/int32 for index params). Written buffers are updated in place.
    Raises SimulationError on an invalid kernel; returns counters. `max_block_threads`
    (e.g. 1024, CUDA's limit) rejects larger blocks; None accepts any block, so that
    schedules still being built (one thread per element) can run."""
    gx, gy, gz = k.grid
    bx, by, bz = k.block
    if min(gx, gy, gz) < 1 or min(bx, by, bz) < 1:
        raise SimulationError(f"kernel {k.name}: grid {k.grid} and block {k.block} must be positive")
    T = bx * by * bz
    if max_block_threads is not None and T > max_block_threads:
        raise SimulationError(f"kernel {k.name}: {T} threads per block, more than the "
                              f"{max_block_threads} allowed")
    flat = {}
    for p in k.params:
        if p.name not in buffers:
            raise SimulationError(f"kernel {k.name}: no buffer given for parameter {p.name}")
        arr = buffers[p.name]
        if not isinstance(arr, np.ndarray):
            raise SimulationError(f"kernel {k.name}: buffer {p.name} is not a numpy array")
        if not p.const and not arr.flags.c_contiguous:
            raise SimulationError(f"kernel {k.name}: written buffer {p.name} must be contiguous")
        view = arr.reshape(-1)
        if p.size and view.size != p.size:
            raise SimulationError(f"kernel {k.name}: buffer {p.name} has {view.size} elements, "
                                  f"parameter expects {p.size}")
        want = _dtype_of(p.ctype) if p.ctype != "int32" else np.int32
        if view.dtype != want:
            if not p.const:
                raise SimulationError(f"kernel {k.name}: written buffer {p.name} is {view.dtype}, "
                                      f"parameter is {p.ctype}")
            if not (view.dtype.kind in "iu" and p.ctype in ("int64", "int32", "int")):
                view = view.astype(want)
        flat[p.name] = view
    nblocks = gx * gy * gz
    stats = SimStats(k.name, tuple(k.grid), tuple(k.block), blocks=nblocks, threads=nblocks * T)
    regs = _register_floats(k.body)
    per_block = T * (1 + regs // 4)       # register arrays weigh on memory too
    chunk = max(1, min(nblocks, max_threads_in_flight // per_block))
    params = {p.name: p for p in k.params}
    scratch: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for b0 in range(0, nblocks, chunk):
            nb = min(chunk, nblocks - b0)
            _Chunk(k, flat, params, scratch, stats, b0, nb, check_races).run()
            stats.chunks += 1
    return stats


def simulate_program(p: K.KernelProgram, env: Mapping[str, np.ndarray], *,
                     check_races: bool = True, max_threads_in_flight: int = MAX_THREADS_IN_FLIGHT,
                     max_block_threads: int | None = None, stats: list | None = None) -> list[np.ndarray]:
    """Run a KernelProgram: `env` holds inputs / params / consts by name (n-d arrays); every
    written buffer starts as zeros. Returns the outputs in their shapes. SimStats of each
    kernel are appended to `stats` when given."""
    np_dtypes = {"float32": F32, "int64": I64, "int32": np.int32, "bool": np.bool_}
    types = {b.name: b.type for b in tuple(p.buffers) + tuple(p.written)}
    mem: dict[str, np.ndarray] = {}
    for name, v in env.items():
        t = types.get(name)
        dt = np_dtypes.get(t.dtype, F32) if t is not None else None
        mem[name] = np.ascontiguousarray(np.asarray(v), dtype=dt).reshape(-1)
    for b in p.written:       # bool results are computed as float 0/1
        dt = np_dtypes.get(b.type.dtype, F32)
        mem[b.name] = np.zeros(b.type.numel, dtype=F32 if dt == np.bool_ else dt)
    for kf in p.kernels:
        bufs = {}
        for prm in kf.params:
            if prm.name not in mem:
                raise SimulationError(f"kernel {kf.name}: buffer {prm.name} is neither in the "
                                      f"program's env nor written by it")
            bufs[prm.name] = mem[prm.name]
        st = simulate_kernel(kf, bufs, max_threads_in_flight=max_threads_in_flight,
                             check_races=check_races, max_block_threads=max_block_threads)
        if stats is not None:
            stats.append(st)
    outs = []
    for o in p.outputs:
        v = mem[o]
        t = types.get(o)
        if t is not None:
            v = v.reshape(t.shape)
            if t.dtype == "bool":
                v = v != 0
        outs.append(v)
    return outs


def _register_floats(stmts) -> int:
    n = 0
    for s in stmts:
        if isinstance(s, K.DeclareArray):
            n += s.size
        elif isinstance(s, K.For):
            n += _register_floats(s.body)
        elif isinstance(s, K.If):
            n += _register_floats(s.then) + _register_floats(s.orelse)
    return n


class _Chunk:
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
        self.cp_open = 1            # id of the cp.async group being filled
        self.cp_committed = 0       # groups 1..cp_committed are committed
        self.exec = {
            K.Declare: self.s_declare, K.DeclareArray: self.s_declare_array,
            K.Assign: self.s_assign, K.SharedArray: self.s_shared_array,
            K.GlobalStore: self.s_global_store, K.AtomicAdd: self.s_atomic_add,
            K.SharedStore: self.s_shared_store,
            K.VectorLoad: self.s_vector_load, K.VectorStore: self.s_vector_store,
            K.For: self.s_for, K.If: self.s_if, K.Barrier: self.s_barrier,
            K.CpAsync: self.s_cp_async, K.CpAsyncCommit: self.s_cp_commit,
            K.CpAsyncWait: self.s_cp_wait, K.TmaLoad: self.s_tma_load,
            K.MbarrierInit: self.s_mbar_init, K.MbarrierWait: self.s_mbar_wait,
            K.Comment: lambda s, mask: None,
        }
        self.eval = {
            K.Var: self.e_var, K.Const: self.e_const, K.Special: self.e_special,
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
        v = dt(0) if s.init is None else _cast(np.asarray(self.ev(s.init, mask)), dt)
        self.scopes[-1][s.name] = [dt, _own(v)]

    def s_declare_array(self, s: K.DeclareArray, mask):
        self.scopes[-1][s.name] = _Reg(np.full((s.size,) + self.shape, s.init, dtype=F32))

    def s_assign(self, s: K.Assign, mask):
        scope = self.lookup(s.name)
        entry = scope[s.name]
        value = self.ev(s.value, mask)
        if isinstance(entry, _Reg):
            if s.index is None:
                self.fail(f"assignment to register array {s.name} needs an index")
            self.reg_store(s.name, entry, self.ev_int(s.index, mask), _cast(value, F32), mask)
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
        return self.call(e.fn, [self.ev(a, mask) for a in e.args])

    def call(self, fn, args):
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

    # -- global memory ------------------------------------------------------------------------

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
        return _cast(v, I64) if e.ctype == "int" else _cast(v, F32) if e.ctype == "float" else v

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

    # -- shared memory ------------------------------------------------------------------------

    def s_shared_array(self, s: K.SharedArray, mask):
        sh = self.shared.get(s.name)
        if sh is None:
            self.shared[s.name] = _Shared(s.name, int(s.size), self.nb)
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
            sh.reads.append((off, mask, n))
        self.stats.shared_bytes_loaded += self.count(mask) * 4 * n
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
        lrf = sh.lr.reshape(-1)
        for off, mask, n in sh.reads:
            keys = self.active(self.rows * sh.size + off, mask)
            tids = self.active(self.tid, mask).astype(np.int32)
            for j in range(n):
                kj = keys + j
                cur = lrf[kj]
                new = np.where((cur == -1) | (cur == tids), tids, np.int32(-2))
                lrf[kj] = new
                lrf[kj[lrf[kj] != new]] = -2
        sh.reads.clear()
        sh.lr_dirty = True

    def shared_write(self, sh: _Shared, off, values, mask, kind, align=1, pend_tag=0):
        """Store values[j] at off+j for every active thread, after the conflict, pending-copy
        and race checks; pend_tag != 0 marks the elements as an async copy in flight."""
        n = len(values)
        off = self.check_bounds(off, n, sh.size, mask, f"shared array {sh.name}", kind, align)
        if np.ndim(off) == 0 or off.shape[0] == 1:
            if mask is None or mask.shape[0] == 1:
                return self.shared_write_cols(sh, off, values, mask, kind, pend_tag)
        keys = self.active(self.rows * sh.size + off, mask)
        if keys.size == 0:
            return
        lanes = self.active(self.lanes.reshape(self.shape), mask)
        vals = [_cast(self.active(v, mask), F32) for v in values]
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
        if pend_tag:
            self.mark_pending(sh, keys, n, pend_tag)
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
            v = _cast(np.asarray(v), F32)
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
        if pend_tag:
            if sh.pend is None:
                sh.pend = np.zeros((self.nb, sh.size), dtype=np.int32)
            for j in range(n):
                sh.pend[:, cols + j] = pend_tag
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

    # -- vector accesses ----------------------------------------------------------------------

    def s_vector_load(self, s: K.VectorLoad, mask):
        off = self.ev_int(s.offset, mask)
        if s.space == "global":
            buf = self.gbuf(s.source, "VectorLoad")
            off = self.check_bounds(off, 4, buf.size, mask, f"buffer {s.source}", "VectorLoad", align=4)
            vals = [_cast(np.take(buf, off + j), F32) for j in range(4)]
            self.stats.global_bytes_loaded += self.count(mask) * 16
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
                self.scopes[-1][name] = [F32, _own(v)]
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

    # -- asynchronous copies ------------------------------------------------------------------

    def s_cp_async(self, s: K.CpAsync, mask):
        if s.nbytes not in (4, 8, 16):
            self.fail(f"cp.async of {s.nbytes} bytes (must be 4, 8 or 16)")
        n = s.nbytes // 4
        buf = self.gbuf(s.buffer, "CpAsync")
        src = self.check_bounds(self.ev_int(s.src_offset, mask), n, buf.size, mask,
                                f"buffer {s.buffer}", "CpAsync", align=n)
        vals = [_cast(np.take(buf, src + j), F32) for j in range(n)]
        self.stats.global_bytes_loaded += self.count(mask) * 4 * n
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

    def s_tma_load(self, s: K.TmaLoad, mask):
        mb = self.mbars.get(s.barrier)
        if mb is None:
            self.fail(f"TmaLoad on mbarrier {s.barrier!r}, which is not initialised (MbarrierInit)")
        act = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        rows, tids = np.nonzero(act)
        if rows.size == 0:
            return
        per_block = np.bincount(rows, minlength=self.nb)
        if per_block.max() > 1:
            r = int(np.argmax(per_block))
            self.fail(f"TmaLoad into {s.array} issued by {int(per_block[r])} threads of block "
                      f"{self.block_index(r)}; a TMA copy is issued by one thread")
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
        issuer = np.broadcast_to(tids.astype(np.int32)[:, None], keys.shape)
        if sh.has_pending and (sh.pend.reshape(-1)[keys] != 0).any():
            self.fail(f"TmaLoad into shared array {sh.name} overwrites an async copy still in flight")
        if self.check:
            lanes = np.broadcast_to((rows * self.T + tids)[:, None], keys.shape).reshape(-1)
            if sh.dirty:
                w = sh.lw.reshape(-1)[keys].reshape(-1)
                bad = (w >= 0) & (w != issuer.reshape(-1))
                if bad.any():
                    self.race_flat(sh, "TmaLoad", keys.reshape(-1), lanes, w, bad, "already written")
            self.fold_reads(sh)
            if sh.lr_dirty:
                r_ = sh.lr.reshape(-1)[keys].reshape(-1)
                bad = (r_ == -2) | ((r_ >= 0) & (r_ != issuer.reshape(-1)))
                if bad.any():
                    self.race_flat(sh, "TmaLoad", keys.reshape(-1), lanes, r_, bad, "read")
        sh.flat[keys] = _cast(buf[src[:, None] + span], F32)
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


def _last_per_key(keys):
    """Indices of the last occurrence of each distinct key (keys are in lane order)."""
    rev = keys[::-1]
    _, first = np.unique(rev, return_index=True)
    return keys.size - 1 - first
