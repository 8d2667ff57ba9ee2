"""128-bit global accesses (005 blockify_launch's vector_width): what float4 changes in the
kernels of memory-bound programs at LLM sizes (TinyLlama-1.1B: hidden 2048, intermediate
5632, 32 tokens). No GPU here, so no timings: the figures are counted by the SIMT simulator
(global load / store instructions executed by active threads, bytes per instruction,
blocks launched; a masked run still reads its clamped address, so the bytes moved differ
where the rounding to whole blocks differs)
and reported by ptxas (registers, with nvcc), for vector_width 4 (default) against 1.
Run: make bench (or PYTHONPATH=. python benchmarks/bench_vector_access.py)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import deplokit
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import simulate_program

SCALAR = {"005_blockify_launch.vector_width": 1}


def programs():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    return {
        "x * 2 + 1 (1024, 1024)": (lambda x: x * 2 + 1, (r(1024, 1024),)),
        "SwiGLU silu(a) * b (1, 32, 5632)": (lambda a, b: F.silu(a) * b, (r(1, 32, 5632), r(1, 32, 5632))),
        "residual add (1, 32, 2048)": (lambda x, res: x + res, (r(1, 32, 2048), r(1, 32, 2048))),
        "RMSNorm (1, 32, 2048)": (nn.RMSNorm(2048, eps=1e-6), (r(1, 32, 2048),)),
        "softmax (32, 2048)": (nn.Softmax(dim=-1), (r(32, 2048),)),
        "row sum x.sum(-1) (32, 4096)": (lambda x: x.sum(-1), (r(32, 4096),)),
    }


def measure(fn, inputs, config):
    c = deplokit.compile(fn, *inputs, config=config)
    env = dict(c.values)
    env.update(c._bind(inputs))
    stats: list = []
    simulate_program(c.kernel_ir, env, stats=stats)
    assert c.check(*inputs, backend="sim").ok
    loads = sum(s.global_loads for s in stats)
    stores = sum(s.global_stores for s in stats)
    moved = sum(s.global_bytes_loaded + s.global_bytes_stored for s in stats)
    blocks = sum(s.blocks for s in stats)
    regs = None
    if nvcc_available():
        regs = max(s.registers for s in c.nvcc().stats.values())
    return loads, stores, moved, blocks, regs


def main() -> None:
    print("vector_width 4 (float4) against 1 (scalar), counted by the SIMT simulator:")
    print(f"  {'program':36} {'ld+st instructions':>25} {'bytes/instr':>13} {'blocks':>15} {'registers':>11}")
    for name, (fn, inputs) in programs().items():
        v, s = measure(fn, inputs, {}), measure(fn, inputs, SCALAR)
        insts_v, insts_s = v[0] + v[1], s[0] + s[1]
        regs = "" if v[4] is None else f"{s[4]} -> {v[4]}"
        print(f"  {name:36} {insts_s:>10} -> {insts_v:>8} ({insts_s / insts_v:.1f}x) "
              f"{s[2] / insts_s:>5.1f} -> {v[2] / insts_v:<5.1f} {s[3]:>6} -> {v[3]:<6} {regs:>11}")


if __name__ == "__main__":
    main()
