"""Run a deduplicated Kernel IR in the SIMT simulator: each Launch runs its unique kernel's
functions with the launch's own tensors bound to the kernel's parameters (passes/dedup.py).

The Kernel IR holds each unique kernel once, preceded by the zero-fill kernels materialize
adds before split-K atomics; those belong to the kernel that follows them.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir import kernel_ir as K
from .sim.errors import SimulationError
from .sim.launch import simulate_kernel
from .sim.values import F32, I64

_NP_DTYPES = {"float32": F32, "int64": I64, "int32": np.int32, "bool": np.bool_}


def functions_by_kernel(program: K.KernelProgram, unique: set[str]) -> dict[str, tuple[K.KernelFunc, ...]]:
    """Unique loop-kernel name -> the Kernel-IR functions one of its launches runs, in order."""
    out: dict[str, tuple[K.KernelFunc, ...]] = {}
    pending: list[K.KernelFunc] = []
    for f in program.kernels:
        pending.append(f)
        if f.name in unique:
            out[f.name] = tuple(pending)
            pending = []
    if pending:
        raise SimulationError(f"kernel functions {', '.join(f.name for f in pending)} belong to no launch")
    return out


def simulate_launches(program: K.KernelProgram, launches, buffers, written, outputs,
                      env: Mapping[str, np.ndarray], *, max_block_threads: int | None = None) -> list[np.ndarray]:
    """Run `launches` in order. `buffers`, `written` and `outputs` are those of the whole
    (Loop-IR) program: every tensor any launch touches; `env` holds inputs, params, consts."""
    types = {b.name: b.type for b in tuple(buffers) + tuple(written) + tuple(program.buffers) + tuple(program.written)}
    mem: dict[str, np.ndarray] = {}
    for name, v in env.items():
        t = types.get(name)
        dt = _NP_DTYPES.get(t.dtype, F32) if t is not None else None
        mem[name] = np.ascontiguousarray(np.asarray(v), dtype=dt).reshape(-1)
    for b in tuple(written) + tuple(program.written):
        if b.name not in mem:
            mem[b.name] = np.zeros(b.type.numel, dtype=_NP_DTYPES.get(b.type.dtype, F32))
    funcs = functions_by_kernel(program, {launch.runs for launch in launches})
    for launch in launches:
        bound = dict(launch.args)
        for f in funcs[launch.runs]:
            bufs = {}
            for prm in f.params:
                name = bound.get(prm.name, prm.name)
                if name not in mem:
                    raise SimulationError(f"launch {launch.kernel}: buffer {name} is neither in the program's "
                                          "env nor written by it")
                bufs[prm.name] = mem[name]
            simulate_kernel(f, bufs, max_block_threads=max_block_threads)
    outs = []
    for o in outputs:
        v, t = mem[o], types.get(o)
        if t is not None:
            v = v.reshape(t.shape)
            if t.dtype == "bool":
                v = v != 0
        outs.append(v)
    return outs
