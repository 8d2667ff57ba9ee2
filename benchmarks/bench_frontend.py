"""Capture + lowering to Loop IR of a Llama-style decoder layer (hidden 2048, 32 heads,
4 kv heads, intermediate 5632, seq 128), timed on this machine. Prints figures; asserts
nothing about speed (run: make bench)."""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from llama_layer import LlamaLayer  # noqa: E402

import deplokit  # noqa: E402
from deplokit.frontend.capture import capture  # noqa: E402
from deplokit.pipeline import Context, lower, lower_through  # noqa: E402
from deplokit.target import get_target  # noqa: E402


def main(repeats: int = 5) -> None:
    torch.manual_seed(0)
    layer = LlamaLayer()
    x = torch.randn(1, 128, 2048)
    deplokit.compile(layer, x)   # warm-up: torch.export's first call pays one-time setup
    cap, low, full = [], [], []
    ctx = Context(get_target("sm_90"))
    for _ in range(repeats):
        t0 = time.perf_counter()
        captured = capture(layer, (x,))
        t1 = time.perf_counter()
        tensor = lower_through(captured.program, "decompose", ctx)
        loop = lower_through(tensor, "fuse_rows", ctx, first="lift")
        t2 = time.perf_counter()
        stages, _ = lower(captured.program, ctx)
        t3 = time.perf_counter()
        cap.append(t1 - t0)
        low.append(t2 - t1)
        full.append(t3 - t2)
    total = [a + b for a, b in zip(cap, low)]
    print(f"decoder layer (hidden 2048, 32/4 heads, inter 5632, seq 128), median of {repeats}:")
    print(f"  capture (torch.export -> Torch IR): {statistics.median(cap) * 1000:.0f} ms")
    print(f"  lowering (Tensor IR + Loop IR):     {statistics.median(low) * 1000:.0f} ms")
    print(f"  capture + lowering to Loop IR:      {statistics.median(total) * 1000:.0f} ms (target < 2000 ms)")
    print(f"  lowering through all six IRs:       {statistics.median(full) * 1000:.0f} ms (after capture)")
    print(f"  {len(captured.program.ops)} torch ops -> {len(tensor.nodes)} tensor nodes -> "
          f"{len(loop.kernels)} kernels")


if __name__ == "__main__":
    main()
