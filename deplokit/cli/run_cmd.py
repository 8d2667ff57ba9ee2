"""`deplokit run`: run a compiled program on its example inputs and check it against torch
eager (exit status 1 on a mismatch); with --bench / --profile, time it on the GPU too.

Without a device, `auto` checks on the SIMT simulator, but only a program that moves at most
SIM_AUTO_LIMIT_BYTES: the simulator runs every thread in Python, and a larger one (the
article's 1x28x2048x2048 softmax) would take minutes and gigabytes to say what the cost
model's figures say at once; `--backend sim` still runs it."""
from __future__ import annotations

from ..compilation import resolve_backend
from ..errors import ExecutionError
from ..frontend.models import ModelProgram
from ..runtime.bench_text import NO_GPU_MESSAGE
from ..runtime.device import gpu_available
from .bench_cmd import bench_after_run
from .program import compile_program, load_program

SIM_AUTO_LIMIT_BYTES = 32 * 2**20


def auto_backend() -> str:
    """The backend `auto` runs on: cupy when a CUDA device is present, else the simulator."""
    return resolve_backend("auto")


def cmd_run(args) -> int:
    if (args.bench or args.profile) and not gpu_available():    # said before the (slow) compile
        print(NO_GPU_MESSAGE, flush=True)
    program = load_program(args)
    if isinstance(program, ModelProgram) and not program.with_weights:
        raise ExecutionError(f"{program.preset.name} is built with its weights on the meta device: it is "
                             "compile-only (deplokit compile MODEL); run a model file with real weights instead")
    compilation = compile_program(program, args.target, args.tuned, args.cache)
    ran = auto_backend() if args.backend == "auto" else args.backend
    how = " (auto)" if args.backend == "auto" else ""
    if args.backend == "auto" and ran == "sim":
        moved = sum(e.bytes * e.launches for e in compilation.inventory())
        if moved > SIM_AUTO_LIMIT_BYTES:
            print(f"backend: none (auto): no CUDA device, and the program moves {moved / 2**20:,.0f} MiB, past the "
                  f"{SIM_AUTO_LIMIT_BYTES // 2**20} MiB the simulator checks in seconds: not checked "
                  "(--backend sim runs the check anyway, for minutes)", flush=True)
            bench_after_run(args, compilation)
            return 0
        how += ": no CUDA device, so the SIMT simulator ran instead of cupy"
    result = compilation.check(backend=ran)
    print(f"backend: {ran}{how}")
    print(f"check against torch eager: {result}", flush=True)
    if result.ok:
        bench_after_run(args, compilation)
    return 0 if result.ok else 1
