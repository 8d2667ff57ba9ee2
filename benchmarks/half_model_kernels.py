"""Where a whole half model's matmuls and attention run: per target, the kernels of the real
model's prefill and decode programs (deplokit.load_lm, trained weights, offline), how many
are matmuls (a K loop), how many of those run on tensor cores (mma.sync or wgmma), and the
flash kernels on tensor cores; each matmul left on FMA is named with its precision.

    .venv/bin/python benchmarks/half_model_kernels.py [--model smollm2-135m] [--prompt 36]
        [--dtype bfloat16] [--target sm_80 --target sm_90]

Compile only (no GPU); a minute a target on 2 cores."""
from __future__ import annotations

import argparse

import deplokit
from deplokit.ir.tile_ir import Loop, walk


def is_matmul(kernel) -> bool:
    return kernel.flash is None and not kernel.reduces_for and \
        any(isinstance(s, Loop) and s.role == "K" for s, _ in walk(kernel.tile().body))


def census(compilation) -> tuple[str, list[str]]:
    kernels = compilation.tile_ir.kernels
    matmuls = [k for k in kernels if is_matmul(k)]
    mma = [k for k in matmuls if k.mma is not None]
    wgmma = [k for k in mma if k.mma.wgmma]
    flash = [k for k in kernels if k.flash is not None]
    flash_mma = [k for k in flash if k.flash.mma is not None]
    line = (f"{len(kernels)} kernels, {len(matmuls)} matmuls: {len(mma)} on tensor cores ({len(wgmma)} wgmma, "
            f"{len(mma) - len(wgmma)} mma.sync), {len(matmuls) - len(mma)} FMA; flash {len(flash)}, "
            f"{len(flash_mma)} on tensor cores")
    return line, [f"FMA: {k.name} (precision {k.precision})" for k in matmuls if k.mma is None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompt", type=int, default=36, help="prompt length of the prefill program")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--target", action="append", choices=("sm_80", "sm_90", "sm_120"))
    args = p.parse_args()
    for target in args.target or ["sm_80", "sm_90"]:
        lm = deplokit.load_lm(args.model, dtype=args.dtype, target=target)
        for name, c in ((f"prefill {args.prompt}", lm.prefill_program(args.prompt)), ("decode", lm.decode)):
            line, fma = census(c)
            print(f"{args.model} {args.dtype} {target} {name}: {line}", flush=True)
            for f in fma:
                print(f"    {f}")


if __name__ == "__main__":
    main()
