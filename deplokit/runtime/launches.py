"""Which Kernel-IR functions run, in which order, on which buffers. Without launches every
function runs once on the buffers its parameters name; a deduplicated program
(passes/dedup.py) runs each Launch's unique kernel with the launch's own tensors bound to the
kernel's parameters. The simulator and the CuPy launch plan both follow this one sequence.

The Kernel IR holds each unique kernel once; a split-K reducer (003) names the kernel whose partial sums it adds
(KernelFunc.reduces_for) and runs just after each launch of it, with the same bindings; a
repack kernel (011) names the kernel whose operand it pads (KernelFunc.repacks_for) and runs
just before each launch of it, with the same bindings.
"""
from __future__ import annotations

from ..errors import ExecutionError
from ..ir import kernel_ir as K


def functions_by_kernel(program: K.KernelProgram, unique: set[str]) -> dict[str, tuple[K.KernelFunc, ...]]:
    """Unique loop-kernel name -> the Kernel-IR functions one of its launches runs, in order:
    its repack kernels, itself, then its split-K reducers."""
    before, after = {}, {}
    for f in program.kernels:
        if f.repacks_for:
            before.setdefault(f.repacks_for, []).append(f)
        if f.reduces_for:
            after.setdefault(f.reduces_for, []).append(f)
    stray = [f.name for f in program.kernels if (f.reduces_for or f.repacks_for or f.name) not in unique]
    if stray:
        raise ExecutionError(f"kernel functions {', '.join(stray)} belong to no launch")
    return {f.name: tuple(before.get(f.name, ())) + (f,) + tuple(after.get(f.name, ()))
            for f in program.kernels if f.name in unique}


def launch_sequence(program: K.KernelProgram, launches=()) -> list[tuple[K.KernelFunc, dict]]:
    """(kernel function, {parameter: buffer}) in the order they run; {} binds each parameter
    to the buffer of its own name."""
    if not launches:
        return [(k, {}) for k in program.kernels]
    funcs = functions_by_kernel(program, {launch.runs for launch in launches})
    return [(f, dict(launch.args)) for launch in launches for f in funcs[launch.runs]]
