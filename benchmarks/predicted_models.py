"""The cost model's prediction for a whole named model (weights on meta, one layer traced and
stitched, as `deplokit compile MODEL`): the sum over launches of each unique kernel's
predicted time (tune/cost_model.estimate, registers estimated), the launches, the bytes moved
and the kernels on tensor cores; per dtype. A static figure, not a measurement.

    .venv/bin/python benchmarks/predicted_models.py [--model Qwen/Qwen2.5-7B] [--seq 128]
        [--dtype float32 --dtype bfloat16] [--target sm_90]"""
from __future__ import annotations

import argparse

from deplokit.compilation import compile_model
from deplokit.frontend import models
from deplokit.tune.cost_model import estimate


def predicted(name: str, seq: int, dtype: str, target: str) -> str:
    c = compile_model(models.build(name, seq=seq, dtype=dtype), target=target)
    times = {k.name: k.time_us for k in estimate(c.tile_ir, c.kernel_ir, c.target, None).kernels}
    inv = c.inventory()
    total_us = sum(e.launches * times.get(e.kernel, 0.0) for e in inv.entries)
    tensor = sum(1 for k in c.tile_ir.kernels if k.mma is not None or (k.flash is not None and k.flash.mma))
    return (f"{name} seq {seq} {dtype} {target}: predicted {total_us / 1000:.2f} ms, {inv.launches} launches of "
            f"{len(inv.entries)} unique kernels ({tensor} on tensor cores), "
            f"{sum(e.launches * e.bytes for e in inv.entries) / 1e9:.2f} GB moved")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", action="append", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--target", default="sm_90", choices=("sm_80", "sm_90", "sm_120"))
    args = p.parse_args()
    for name in args.model or ["TinyLlama/TinyLlama-1.1B-Chat-v1.0", "Qwen/Qwen2.5-7B"]:
        for dtype in args.dtype or ["float32", "bfloat16"]:
            print(predicted(name, args.seq, dtype, args.target), flush=True)


if __name__ == "__main__":
    main()
