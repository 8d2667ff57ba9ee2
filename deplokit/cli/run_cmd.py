"""`deplokit run`: run a compiled program on its example inputs and check it against torch
eager (exit status 1 on a mismatch); with --bench / --profile, time it on the GPU too."""
from __future__ import annotations

from ..compilation import resolve_backend
from ..errors import ExecutionError
from ..frontend.models import ModelProgram
from .bench_cmd import bench_after_run
from .program import compile_program, load_program


def auto_backend() -> str:
    """The backend `auto` runs on: cupy when a CUDA device is present, else the simulator."""
    return resolve_backend("auto")


def cmd_run(args) -> int:
    program = load_program(args)
    if isinstance(program, ModelProgram) and not program.with_weights:
        raise ExecutionError(f"{program.preset.name} is built with its weights on the meta device: it is "
                             "compile-only (deplokit compile MODEL); run a model file with real weights instead")
    compilation = compile_program(program, args.target, args.tuned, args.cache)
    ran = auto_backend() if args.backend == "auto" else args.backend
    result = compilation.check(backend=ran)
    how = " (auto)" if args.backend == "auto" else ""
    if args.backend == "auto" and ran == "sim":
        how += ": no CUDA device, so the SIMT simulator ran instead of cupy"
    print(f"backend: {ran}{how}")
    print(f"check against torch eager: {result}")
    if result.ok:
        bench_after_run(args, compilation)
    return 0 if result.ok else 1
