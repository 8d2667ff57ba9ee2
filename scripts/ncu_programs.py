"""The three programs Nsight Compute reads on the device (issue 17 part 5), run once each.

    python scripts/ncu_programs.py NAME [--target sm_90] [--check]
    python scripts/ncu_programs.py --entry SUITE_ENTRY      (e.g. softmax.qwen.s512)

    matmul4096       x @ w, 4096 x 4096 x 4096
    proj_s128        TinyLlama q_proj at seq 128: (1, 128, 2048) @ (2048, 2048)
    attention_s512   Qwen2.5-7B causal GQA attention at seq 512 (28 query heads, 4 kv heads, d 128)

Inputs are seeded random numbers on the device (never zeros). The program is checked against
torch eager on the device before it runs under the profiler, so a wrong kernel is never
profiled. `--check` compiles every program to CUDA on the host (no GPU) and prints its kernels.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F

import deplokit


def _matmul(x, w):
    return x @ w


def _attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


PROGRAMS = {
    "matmul4096": (_matmul, ((4096, 4096), (4096, 4096))),
    "proj_s128": (_matmul, ((1, 128, 2048), (2048, 2048))),
    "attention_s512": (_attention, ((1, 28, 512, 128), (1, 4, 512, 128), (1, 4, 512, 128))),
}


def inputs(name: str, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    if name not in PROGRAMS or "." in name:       # a suite entry: its own seeded inputs
        from deplokit.bench.suite import entry
        return entry(name).inputs(device=device)
    g = torch.Generator().manual_seed(0)
    fn, shapes = PROGRAMS[name]
    out = [torch.randn(s, generator=g) for s in shapes]
    if fn is _matmul:
        out[1] = out[1] / math.sqrt(shapes[1][0])   # outputs stay O(1)
    return tuple(t.to(device) for t in out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", choices=sorted(PROGRAMS))
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--check", action="store_true", help="compile every program on the host and exit")
    ap.add_argument("--entry", default=None, help="an LLM suite entry instead (the device session's losers)")
    args = ap.parse_args(argv)
    if args.entry is not None:
        from deplokit.bench.suite import entry
        e = entry(args.entry)
        PROGRAMS[args.entry] = (e.program(), e.shapes)
        args.name = args.entry
    if args.check:
        for name, (fn, shapes) in PROGRAMS.items():
            c = deplokit.compile(fn, *(torch.empty(s, device="meta") for s in shapes), target=args.target)
            print(name, " ".join(k.name for k in c.kernel_ir.kernels))
        return 0
    if args.name is None:
        ap.error("give a program name")
    fn, _ = PROGRAMS[args.name]
    xs = inputs(args.name, "cuda")
    c = deplokit.compile(fn, *xs, target=args.target)
    got = c.run(*xs, backend="cupy")
    torch.cuda.synchronize()
    want = fn(*xs)
    err = (got - want).abs().max().item()
    tol = 1e-3 * max(1.0, want.abs().max().item())
    print(f"{args.name}: max |deplokit - eager| = {err:.3g} (tolerance {tol:.3g})")
    if not err <= tol:
        print(f"{args.name}: MISMATCH against eager; not profiled further", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
