"""Kernel and program launches: buffer checks, chunking of the grid, and the program-level
memory of a KernelProgram."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...ir import kernel_ir as K
from ...ir.kernel_ir import name_problems
from ...ir.types import ctype_bytes
from ...target import STATIC_SMEM_PER_BLOCK
from ..launches import launch_sequence
from ..numpy_ops import NP_DTYPES
from .errors import SimulationError
from .exec import Chunk
from .stats import SimStats
from .values import F32, dtype_of

MAX_THREADS_IN_FLIGHT = 1 << 20
BLOCK_ORDERS = ("forward", "reversed")


def simulate_kernel(k: K.KernelFunc, buffers: dict[str, np.ndarray], *,
                    max_threads_in_flight: int = MAX_THREADS_IN_FLIGHT,
                    check_races: bool = True, max_block_threads: int | None = None,
                    max_smem_per_block: int | None = None, block_order: str = "forward") -> SimStats:
    """Run every thread of every block of `k` over `buffers` (param name -> flat numpy array;
    float32, or int64/int32 for index params). Written buffers are updated in place.
    Raises SimulationError on an invalid kernel; returns counters. `max_block_threads`
    (e.g. 1024, CUDA's limit) rejects larger blocks; None accepts any block, so that
    schedules still being built (one thread per element) can run. `max_smem_per_block`
    (the target's dynamic shared memory per block) rejects a kernel whose static and dynamic
    shared memory exceed it; arrays carved from dynamic shared memory must lie inside the
    kernel's dynamic bytes without overlapping, whatever the limit. `block_order`: "forward"
    runs the chunks of blocks first to last and an atomic's lanes in block order; "reversed"
    runs them last to first (a result that depends on the order blocks arrive in shows)."""
    if block_order not in BLOCK_ORDERS:
        raise SimulationError(f"block_order {block_order!r}: one of {', '.join(BLOCK_ORDERS)}")
    gx, gy, gz = k.grid
    bx, by, bz = k.block
    if min(gx, gy, gz) < 1 or min(bx, by, bz) < 1:
        raise SimulationError(f"kernel {k.name}: grid {k.grid} and block {k.block} must be positive")
    T = bx * by * bz
    problems = name_problems(k)
    if problems:   # what nvcc would refuse, the simulator refuses too
        raise SimulationError(f"kernel {k.name}: CUDA C++ rejects its names: {'; '.join(problems)}")
    if max_block_threads is not None and T > max_block_threads:
        raise SimulationError(f"kernel {k.name}: {T} threads per block, more than the "
                              f"{max_block_threads} allowed")
    _check_shared_memory(k, max_smem_per_block)
    flat = {}
    for p in k.params:
        if p.name not in buffers:
            raise SimulationError(f"kernel {k.name}: no buffer given for parameter {p.name}")
        arr = buffers[p.name]
        if not isinstance(arr, np.ndarray):
            raise SimulationError(f"kernel {k.name}: buffer {p.name} is not a numpy array")
        if k.index_bits == 32 and arr.size > 2 ** 31 - 1:   # its offsets would wrap on a GPU
            raise SimulationError(f"kernel {k.name}: buffer {p.name} has {arr.size} elements, more than "
                                  f"32-bit index arithmetic reaches (the kernel is not stamped index_bits=64)")
        if not p.const and not arr.flags.c_contiguous:
            raise SimulationError(f"kernel {k.name}: written buffer {p.name} must be contiguous")
        view = arr.reshape(-1)
        if p.size and view.size != p.size:
            raise SimulationError(f"kernel {k.name}: buffer {p.name} has {view.size} elements, "
                                  f"parameter expects {p.size}")
        want = dtype_of(p.ctype) if p.ctype != "int32" else np.int32
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
        starts = range(0, nblocks, chunk)
        for b0 in (reversed(starts) if block_order == "reversed" else starts):
            nb = min(chunk, nblocks - b0)
            Chunk(k, flat, params, scratch, stats, b0, nb, check_races, block_order == "reversed").run()
            stats.chunks += 1
    return stats


def simulate_program(p: K.KernelProgram, env: Mapping[str, np.ndarray], *, launches=(), whole=None,
                     check_races: bool = True, max_threads_in_flight: int = MAX_THREADS_IN_FLIGHT,
                     max_block_threads: int | None = None, stats: list | None = None,
                     max_smem_per_block: int | None = None, block_order: str = "forward") -> list[np.ndarray]:
    """Run a KernelProgram: `env` holds inputs / params / consts by name (n-d arrays); every
    written buffer starts as zeros. Returns the outputs in their shapes. SimStats of each
    kernel are appended to `stats` when given. A deduplicated program also needs its
    `launches` and the `whole` Loop-IR program (every tensor a launch binds, the outputs).
    `block_order`: as simulate_kernel's."""
    programs = (whole, p) if whole is not None else (p,)
    types = {b.name: b.type for q in programs for b in tuple(q.buffers) + tuple(q.written)}
    mem: dict[str, np.ndarray] = {}
    for name, v in env.items():
        t = types.get(name)
        dt = NP_DTYPES.get(t.dtype, F32) if t is not None else None
        mem[name] = np.ascontiguousarray(np.asarray(v), dtype=dt).reshape(-1)
    for b in (b for q in programs for b in q.written):
        if b.name not in mem:    # an in-place write into state: the state's memory itself
            mem[b.name] = mem[b.alias] if b.alias else np.zeros(b.type.numel, dtype=NP_DTYPES.get(b.type.dtype, F32))
    for kf, bound in launch_sequence(p, launches):
        bufs = {}
        for prm in kf.params:
            name = bound.get(prm.name, prm.name)
            if name not in mem:
                raise SimulationError(f"kernel {kf.name}: buffer {name} is neither in the "
                                      f"program's env nor written by it")
            bufs[prm.name] = mem[name]
        st = simulate_kernel(kf, bufs, max_threads_in_flight=max_threads_in_flight,
                             check_races=check_races, max_block_threads=max_block_threads,
                             max_smem_per_block=max_smem_per_block, block_order=block_order)
        if stats is not None:
            stats.append(st)
    outs = []
    for o in (whole if whole is not None else p).outputs:
        v = mem[o]
        t = types.get(o)
        if t is not None:
            v = v.reshape(t.shape)
            if t.dtype == "bool":
                v = v != 0
        outs.append(v)
    return outs


def _check_shared_memory(k: K.KernelFunc, limit: int | None) -> None:
    static = K.declared_smem_bytes(k)
    spans = sorted((s.offset, s.offset + ctype_bytes(s.ctype) * s.size, s.name) for s in K.walk_stmts(k.body)
                   if isinstance(s, K.SharedArray) and s.offset is not None)
    for (a0, a1, a), (b0, _, b) in zip(spans, spans[1:]):
        if b0 < a1 and a != b:
            raise SimulationError(f"kernel {k.name}: shared arrays {a} and {b} overlap in dynamic shared memory "
                                  f"(bytes {a0}..{a1} and {b0}..)")
    if spans and (spans[0][0] < 0 or max(e for _, e, _ in spans) > k.dynamic_smem):
        raise SimulationError(f"kernel {k.name}: its dynamic shared arrays reach past the {k.dynamic_smem} "
                              f"bytes of dynamic shared memory the launch gives it")
    if limit is None:
        return
    if static > STATIC_SMEM_PER_BLOCK:
        raise SimulationError(f"kernel {k.name}: {static} bytes of static shared memory; a block may declare "
                              f"at most {STATIC_SMEM_PER_BLOCK} statically (more needs dynamic shared memory)")
    if static + k.dynamic_smem > limit:
        raise SimulationError(f"kernel {k.name}: {static + k.dynamic_smem} bytes of shared memory ({static} "
                              f"static, {k.dynamic_smem} dynamic); the target allows {limit} per block")


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
