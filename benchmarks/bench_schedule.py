"""The GPU schedule on this CPU machine: compile time of RMSNorm through all six IRs (and
of the 16 Tile-IR passes alone), and the SIMT simulator running the compiled kernels of
RMSNorm (1, 32, 2048) and a 512 x 512 x 512 matmul. Prints figures (run: make bench);
targets: simulator <= 2 s each, compile through the 16 passes <= 1 s."""
from __future__ import annotations

import torch
import torch.nn as nn
from bench_sim import _time as median_time  # the benchmarks' one median-of-n timer

import deplokit
from deplokit.passes.schedule import schedule
from deplokit.pipeline import Context


def main() -> None:
    torch.manual_seed(0)
    norm, x = nn.RMSNorm(2048), torch.randn(1, 32, 2048)
    c = deplokit.compile(norm, x)                 # warm-up (torch.export's first call)
    whole = median_time(lambda: deplokit.compile(norm, x), 5)
    passes = median_time(lambda: schedule(c.loop_ir, Context(c.target)), 5)
    print("compile RMSNorm (1, 32, 2048), median of 5:")
    print(f"  torch.export -> CUDA text, all six IRs: {whole * 1000:.0f} ms")
    print(f"  the 16 Tile-IR passes alone:           {passes * 1000:.1f} ms (target <= 1000 ms)")

    sim_norm = median_time(lambda: c.run(x, backend="sim"), repeats=3)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    mm = deplokit.compile(lambda a, b: a @ b, a, b)
    sim_mm = median_time(lambda: mm.run(a, b, backend="sim"), repeats=3)
    print("SIMT simulator on the compiled kernels, median of 3:")
    print(f"  RMSNorm (1, 32, 2048):   {sim_norm:.3f} s (target <= 2 s), {c.check(x, backend='sim')}")
    print(f"  matmul 512 x 512 x 512:  {sim_mm:.3f} s (target <= 2 s), "
          f"{mm.check(a, b, backend='sim', rtol=1e-4, atol=1e-4)}")


if __name__ == "__main__":
    main()
