"""Few long rows: what the two-phase reduction (passes/split/split_reduce.py) changes.

Each program is compiled for sm_90 (132 SMs) twice: with split_reduce off
(config {"split_reduce.splits": 1}) and on (the default decision). Prints, for each, the
kernels with their grid (blocks) and block (threads), the SIMT simulator's wall time for one run (a CPU
program: the simulator
steps every thread, so fewer sequential loop iterations per thread run faster), and the
check against torch eager. No GPU timings: none was available.
Run: .venv/bin/python benchmarks/bench_split_reduce.py"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import deplokit  # noqa: E402
from deplokit.target import get_target  # noqa: E402

TARGET = "sm_90"
PROGRAMS = {
    "softmax (3, 49999) @ (49999, 7)": (lambda x, w: torch.softmax(x, -1) @ w,
                                        (torch.randn(3, 49999), torch.randn(49999, 7))),
    "log_softmax over a vocabulary (1, 32000)": (lambda x: F.log_softmax(x, -1), (torch.randn(1, 32000),)),
    "rmsnorm (2, 65536)": (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
                           (torch.randn(2, 65536),)),
    "sum (4, 100000)": (lambda x: x.sum(-1), (torch.randn(4, 100000),)),
}


def describe(c) -> str:
    return ", ".join(f"{k.name} {k.grid[0] * k.grid[1] * k.grid[2]}x{k.threads}" for k in c.kernel_ir.kernels)


def main() -> None:
    torch.manual_seed(0)
    sms = get_target(TARGET).sm_count
    print(f"target {TARGET}: {sms} SMs; kernels as name blocks x threads")
    for name, (fn, inputs) in PROGRAMS.items():
        print(f"== {name}")
        for label, config in (("off", {"split_reduce.splits": 1}), ("on ", {})):
            c = deplokit.compile(fn, *inputs, target=TARGET, config=config)
            t = time.perf_counter()
            check = c.check(*inputs, backend="sim")
            seconds = time.perf_counter() - t
            print(f"  split {label}: sim {seconds:6.2f} s, {'ok' if check.ok else 'MISMATCH'}; {describe(c)}")


if __name__ == "__main__":
    main()
