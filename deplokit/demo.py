"""`python -m deplokit.demo` (or `make demo`): compile the RMSNorm example, print all six
IRs, run it on every backend and after every scheduling pass, check each against torch
eager, and compile the CUDA with nvcc for the three targets when nvcc is there.

Exits with status 1 if any backend disagrees with eager."""
from __future__ import annotations

import sys

import torch
from torch import nn

import deplokit
from deplokit.cli.compile_cmd import format_ir
from deplokit.passes.schedule import SCHEDULE
from deplokit.pipeline import STAGES
from deplokit.runtime.device import gpu_available
from deplokit.runtime.nvcc import annotate_program, nvcc_available

TITLES = {"torch": "Torch IR", "tensor": "Tensor IR", "loop": "Loop IR", "tile": "Tile IR",
          "kernel": "Kernel IR", "cuda": "CUDA"}


def main() -> int:
    torch.manual_seed(0)
    model = nn.RMSNorm(2048)
    x = torch.randn(1, 32, 2048)
    print("deplokit demo: nn.RMSNorm(2048) on x = torch.randn(1, 32, 2048)\n")
    compilation = deplokit.compile(model, x, target="sm_90")

    for stage in STAGES:
        print(f"==== {TITLES.get(stage, stage)} ({stage}) ====")
        print(format_ir(compilation, stage, verbose=1))

    failed = []
    print("==== check against torch eager ====")
    for backend in deplokit.BACKENDS:
        if backend == "auto":
            continue
        if backend == "cupy" and not gpu_available():
            print(f"{backend:>8}: not run: no CUDA device here (the simulator above ran the same kernels)")
            continue
        result = compilation.check(x, backend=backend)
        print(f"{backend:>8}: {result}")
        if not result.ok:
            failed.append(backend)
    print(f"==== the Tile IR after each of the {len(SCHEDULE)} passes, on the simulator ====")
    for check in compilation.check_passes(x):
        print(f"  {check}")
        if not check.result.ok:
            failed.append(check.name)

    if nvcc_available():
        print("==== nvcc -cubin, ptxas statistics ====")
        for target in ("sm_80", "sm_90", "sm_120"):
            built = deplokit.compile(model, x, target=target)
            found = built.nvcc()
            for k in annotate_program(built.kernel_ir, found).kernels:
                print(f"  {target} {k.name}: {k.registers} registers, {k.smem_bytes} bytes shared memory, "
                      f"{k.spills} bytes spilled")
    else:
        print("nvcc not found: the CUDA was not compiled (install the CUDA toolkit to check it)")

    if failed:
        print(f"FAILED: {', '.join(failed)} disagree with torch eager", file=sys.stderr)
        return 1
    print("all backends agree with torch eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
