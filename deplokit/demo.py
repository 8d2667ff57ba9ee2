"""`python -m deplokit.demo` (or `make demo`): compile the RMSNorm example, print every IR
built so far, run it on every backend and check each against torch eager.

Exits with status 1 if any backend disagrees with eager."""
from __future__ import annotations

import sys

import torch
from torch import nn

import deplokit
from deplokit.cli import format_ir
from deplokit.pipeline import STAGES

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
        result = compilation.check(x, backend=backend)
        print(f"{backend:>8}: {result}")
        if not result.ok:
            failed.append(backend)
    if failed:
        print(f"FAILED: {', '.join(failed)} disagree with torch eager", file=sys.stderr)
        return 1
    print("all backends agree with torch eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
