"""Where half matmuls of few rows land: a bf16 linear (1, M, K) x (N, K)^T at default knobs for
each M x N x K of a grid (M 16 to 100, N 64 to 2048, K 576 and 2048), compiled for each target;
prints each shape left on FMA and, per target, how many of the shapes run on tensor cores.

    .venv/bin/python benchmarks/tensor_core_reach.py [--target sm_80 ...]

Compile only (no GPU); about 10 to 30 s a target on 2 cores."""
from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir.tile_ir import Loop, walk

ROWS = (16, 20, 32, 36, 48, 63, 64, 100)
COLS = (64, 192, 1000, 2048)
DEPTHS = (576, 2048)


def on_tensor_cores(c) -> bool:
    matmuls = [k for k in c.tile_ir.kernels
               if k.flash is None and not k.reduces_for
               and any(isinstance(s, Loop) and s.role == "K" for s, _ in walk(k.tile().body))]
    return bool(matmuls) and all(k.mma is not None for k in matmuls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", action="append", choices=("sm_80", "sm_90", "sm_120"))
    args = p.parse_args()
    for target in args.target or ["sm_80", "sm_90", "sm_120"]:
        fma = []
        shapes = list(itertools.product(ROWS, COLS, DEPTHS))
        for m, n, k in shapes:
            x, w = torch.randn(1, m, k).bfloat16(), torch.randn(n, k).bfloat16()
            if not on_tensor_cores(deplokit.compile(lambda x, w: F.linear(x, w), x, w, target=target)):
                fma.append((m, n, k))
                print(f"  FMA {target} {m}x{n}x{k}", flush=True)
        print(f"{target}: {len(shapes) - len(fma)} of {len(shapes)} bf16 matmul shapes on tensor cores, "
              f"{len(fma)} on FMA", flush=True)


if __name__ == "__main__":
    main()
