"""cumsum over long rows: the blocked scan (passes/decompose/cumsum.py) against one masked sum
over the whole row (the quadratic decomposition it replaced, rebuilt by raising DIRECT to the
row length). Prints, for each, the kernels, the reduce-loop terms each output element sums,
the SIMT simulator's wall time for one run (a CPU program), and the largest error against
torch eager. No GPU timings: none was available.
Run: .venv/bin/python benchmarks/bench_cumsum.py [--no-quadratic]"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import deplokit  # noqa: E402
from deplokit.ir.loop_ir import Loop, walk  # noqa: E402
from deplokit.passes.decompose import cumsum as rule  # noqa: E402

SHAPES = ((2, 65536), (64, 4096), (1, 300_000))


def terms(c) -> int:
    return max(sum(lp.extent for lp, _ in walk(k.body) if isinstance(lp, Loop) and lp.kind == "reduce")
               for k in c.loop_ir.kernels)


def measure(x, direct: int) -> str:
    saved, rule.DIRECT = rule.DIRECT, direct
    try:
        c = deplokit.compile(lambda t: torch.cumsum(t, -1), x)
    finally:
        rule.DIRECT = saved
    t0 = time.perf_counter()
    got = c.run(x, backend="sim")
    seconds = time.perf_counter() - t0
    err = float((got - torch.cumsum(x, -1)).abs().max())
    return (f"{len(c.loop_ir.kernels)} kernel(s), <= {terms(c)} terms per output, sim {seconds:.2f} s, "
            f"max abs error {err:.3g}")


def main() -> None:
    torch.manual_seed(0)
    quadratic = "--no-quadratic" not in sys.argv
    for shape in SHAPES:
        x = torch.randn(*shape)
        print(f"cumsum {shape}:")
        print(f"  blocked scan (CHUNK {rule.CHUNK}):  {measure(x, rule.DIRECT)}")
        if quadratic and shape[-1] * x.numel() <= 2 ** 33:
            print(f"  one masked sum per row:  {measure(x, shape[-1])}")


if __name__ == "__main__":
    main()
