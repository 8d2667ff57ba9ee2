"""SM balance and the cost model on projections that are not in the suite: a linear
(1, M, K) x (N, K)^T at default knobs for the (N, K) of open models' projections (Llama-3-8B,
Phi-3-mini, Qwen2.5-1.5B / 0.5B, Gemma-2B, Llama-2-13B) at M = 16 to 512 tokens, per target and
dtype. Prints each matmul kernel below issue 26's bar (SM balance < 0.90 with < 8 blocks an
SM) with what 003's trace says of its grid and, per target and dtype, how many fall below,
the cost model's total µs (every kernel, reducers included), its geometric mean a shape, and
how many kernels 003 dealt to stream-K's workers (reduce=stream_k: grid_plan.stream_k_plan).

    .venv/bin/python benchmarks/balance_sweep.py [--target sm_90 ...] [--dtype bfloat16 ...]
        [--tokens 128 ...] [--projection 256x1536 ...] [--random 60 --seed 7]

`--random N` sweeps N random shapes instead (M of 1 to 512 rows, N and K multiples of 64 up to
8192; `--seed` picks them): shapes no one chose, to check the planner on.

Compile only (no GPU): about 2 to 4 minutes a target and dtype on 2 cores. Run it on two
commits to compare (the closing notes' before -> after)."""
from __future__ import annotations

import argparse
import math
import random

import torch
import torch.nn.functional as F

import deplokit
from deplokit.analysis.occupancy import balanced, sm_balance
from deplokit.passes.schedule.grid_plan import matmul_geometry
from deplokit.tune.cost_model import estimate

PROJECTIONS = (  # (N, K): q/o, gate/up, down, k/v of each model, and a few odd ones
    (4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096),          # Llama-3-8B
    (3072, 3072), (8192, 3072), (3072, 8192), (9216, 3072),            # Phi-3-mini
    (1536, 1536), (8960, 1536), (1536, 8960), (256, 1536),             # Qwen2.5-1.5B
    (2048, 2048), (16384, 2048), (2048, 16384),                        # Gemma-2B
    (5120, 5120), (13824, 5120), (5120, 13824),                        # Llama-2-13B
    (896, 896), (4864, 896), (128, 896),                               # Qwen2.5-0.5B
)
TOKENS = (16, 64, 96, 128, 200, 256, 512)


def matmul_grids(c) -> list[tuple[str, int]]:
    """(name, blocks) of each chunked matmul kernel of `c` (grid_plan.matmul_geometry; a split's
    reducer is none)."""
    tiles = {k.name: k for k in c.tile_ir.kernels}
    return [(f.name, f.grid[0] * f.grid[1] * f.grid[2]) for f in c.kernel_ir.kernels
            if f.name in tiles and matmul_geometry(tiles[f.name]) is not None]


def planned_why(c, name: str) -> str:
    """What 003's trace says of kernel `name`'s grid: its SM balance and why, else its first remark."""
    remarks = [r.split(": ", 1)[1] for st in c.trace if st.name == "003_split_matmul_k" for r in st.remarks
               if r.startswith(f"{name}: ")]
    said = next((r for r in remarks if "SM balance" in r), remarks[0] if remarks else "003 says nothing")
    return said[said.index("SM balance"):] if "SM balance" in said else said


def sweep(target: str, dtype: torch.dtype, shapes) -> tuple[int, int, float, float, int]:
    """(kernels below the bar, matmul kernels, total µs, geometric mean µs, kernels dealt to
    stream-K) over the (M, N, K) `shapes`."""
    below = kernels = dealt = 0
    total, logs = 0.0, 0.0
    for m, n, k in shapes:
        x, w = torch.randn(1, m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
        c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target=target)
        sms = c.target.sm_count
        times = {e.name: e.time_us for e in estimate(c.tile_ir, c.kernel_ir, c.target).kernels}
        streamed = {t.name for t in c.tile_ir.kernels if t.split_k is not None and t.split_k.stream_k}
        for name, blocks in matmul_grids(c):
            kernels += 1
            dealt += name in streamed
            if not balanced(blocks, sms):
                below += 1
                print(f"  {target} {str(dtype)[6:]} {m}x{n}x{k} {name}: {blocks} blocks, "
                      f"SM balance {sm_balance(blocks, sms):.2f}\n    003: {planned_why(c, name)}", flush=True)
        us = sum(times.values())
        total += us
        logs += math.log(us)
    return below, kernels, total, math.exp(logs / len(shapes)), dealt


def random_shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    """`count` (M, N, K): M of 1 to 512, N and K multiples of 64 up to 8192 (K from 256)."""
    rng = random.Random(seed)
    return [(rng.randint(1, 512), 64 * rng.randint(1, 128), 64 * rng.randint(4, 128)) for _ in range(count)]


def projection(text: str) -> tuple[int, int]:
    n, _, k = text.partition("x")
    if not (n.isdigit() and k.isdigit() and int(n) and int(k)):
        raise argparse.ArgumentTypeError(f"{text!r} is not N x K, e.g. 256x1536")
    return int(n), int(k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", action="append", choices=("sm_80", "sm_90", "sm_120"))
    p.add_argument("--dtype", action="append", choices=("float32", "bfloat16"))
    p.add_argument("--tokens", action="append", type=int, help="rows M (default: 16 to 512)")
    p.add_argument("--projection", action="append", type=projection,
                   help="N x K of the weight, e.g. 256x1536 (default: the list)")
    p.add_argument("--random", type=int, default=0, metavar="N", help="N random shapes instead of the list")
    p.add_argument("--seed", type=int, default=0, help="the random shapes' seed (default 0)")
    args = p.parse_args(argv)
    if args.random < 0:
        p.error("--random takes a count of shapes, 0 or more")
    if args.random:
        shapes = random_shapes(args.random, args.seed)
    else:
        shapes = [(m, n, k) for m in args.tokens or TOKENS for n, k in args.projection or PROJECTIONS]
    for target in args.target or ["sm_90"]:
        for dtype in args.dtype or ["float32", "bfloat16"]:
            below, kernels, total, geo, dealt = sweep(target, getattr(torch, dtype), shapes)
            print(f"{target} {dtype}: {below} of {kernels} matmul kernels below SM balance 0.90 with < 8 blocks "
                  f"an SM; cost model {total:.0f} µs in all, geomean {geo:.2f} µs a shape; {dealt} dealt to "
                  f"stream-K", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
