"""k003 zero_init: a kernel that clears each tensor a kernel adds into with atomics.

No scheduling pass emits atomics any more (003 split_matmul_k writes partial sums to a
workspace and a reduce kernel adds them in split order, bit-identical run to run); a Tile
kernel written by hand with AtomicAdd still stamps its output (TileKernel.zero_init, carried
to KernelFunc.zero_init), and the program itself zero-initialises it, so it is correct on a GPU whatever the
output buffer
held (the simulator's zero-filled outputs are not relied on). The zero kernel goes just
before the kernel it serves and names it (KernelFunc.zero_init_for): a launch of that
kernel runs it first (runtime/launches.py reads the field)."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.kernel_ir import KernelFunc, KernelProgram, Param
from ..record import Noted, Pass, fresh_name

ZERO_BLOCK = 256


def apply(program: KernelProgram, pctx=None) -> KernelProgram:
    sizes = {b.name: b.type.numel for b in tuple(program.buffers) + tuple(program.written)}
    taken = {k.name for k in program.kernels}
    kernels: list[KernelFunc] = []
    notes: list[str] = []
    for k in program.kernels:
        if not any(z.zero_init_for == k.name for z in program.kernels):    # not cleared yet
            for tensor in k.zero_init:
                name = fresh_name(f"{k.name}_zero", taken)
                taken.add(name)
                kernels.append(zero_kernel(name, tensor, sizes[tensor], k.name))
                notes.append(f"{name} zeroes {tensor} before {k.name}, whose blocks add partial sums into it")
        kernels.append(k)
    if not notes:
        return program
    return Noted(dataclasses.replace(program, kernels=tuple(kernels)), tuple(notes))


def zero_kernel(name: str, tensor: str, numel: int, owner: str) -> KernelFunc:
    """tensor[:] = 0, one element per thread, for the kernel `owner`."""
    threads = min(ZERO_BLOCK, numel)
    blocks = -(-numel // threads)
    i = K.Binary("+", K.Binary("*", K.Special("bid.x"), K.Const(threads, "int")), K.Special("tid.x")) \
        if blocks > 1 else K.Special("tid.x")
    store = K.GlobalStore(tensor, K.Var("i"), K.Const(0.0))
    body = [K.Declare("i", "int", i)]
    if blocks * threads != numel:
        store = K.If(K.Binary("<", K.Var("i"), K.Const(numel, "int")), (store,))
    body.append(store)
    return KernelFunc(name, (Param(tensor, "float", False, numel),), (blocks, 1, 1), (threads, 1, 1), tuple(body),
                      zero_init_for=owner)


PASS = Pass("003_zero_init", "kernel", "zero the outputs split-K blocks add partial sums into, in a kernel "
            "launched just before theirs", apply)
