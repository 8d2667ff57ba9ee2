"""k004 unclash_names: a kernel-local whose name C would reject, or that meets a parameter's
name (an input called `tid`, `acc0` or `x_smem` beside the generated locals of that name),
is renamed: locals are private to their kernel, parameters are bound by name and keep theirs
(deplokit/ir/kernel_ir.py; the simulator refuses what this would leave)."""
from __future__ import annotations

import dataclasses

from ...ir.kernel_ir import KernelProgram, declared_locals, unclash_locals
from ..record import Noted, Pass


def apply(program: KernelProgram, pctx=None) -> KernelProgram:
    kernels = tuple(unclash_locals(k) for k in program.kernels)
    notes = tuple(f"{old.name}: locals {', '.join(sorted(set(declared_locals(old)) - set(declared_locals(new))))} "
                  f"renamed (they met a parameter's name or C's)"
                  for old, new in zip(program.kernels, kernels) if new is not old)
    if not notes:
        return program
    return Noted(dataclasses.replace(program, kernels=kernels), notes)


PASS = Pass("004_unclash_names", "kernel", "rename kernel-locals that meet a parameter's name or one C rejects",
            apply)
