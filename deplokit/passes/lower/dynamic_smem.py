"""Dynamic shared memory for a kernel whose arrays exceed what a block may declare
statically (48 KiB on every architecture; ptxas refuses more): every shared array is
carved from the launch's dynamic shared memory at a fixed byte offset, decided here once and
stamped on the IR (SharedArray.offset, KernelFunc.dynamic_smem). The renderer declares one
`extern __shared__` buffer and points each array into it; the launch plan gives the launch
that many bytes and raises the kernel's limit (cudaFuncAttributeMaxDynamicSharedMemorySize);
the simulator refuses a kernel above the target's dynamic limit per block. The mbarriers
stay static (8 bytes each)."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.types import ctype_bytes
from ...target import STATIC_SMEM_PER_BLOCK


def carve(func: K.KernelFunc, static_limit: int = STATIC_SMEM_PER_BLOCK) -> K.KernelFunc:
    """`func` with its shared arrays in dynamic shared memory when they do not fit the
    static limit (each at a multiple of its alignment, in declaration order), else as it is."""
    if func.dynamic_smem or K.declared_smem_bytes(func) <= static_limit:
        return func
    offsets: dict[str, int] = {}
    end = 0
    for s in K.walk_stmts(func.body):
        if isinstance(s, K.SharedArray) and s.name not in offsets:
            at = -(-end // s.align) * s.align
            offsets[s.name] = at
            end = at + ctype_bytes(s.ctype) * s.size

    def place(body):
        out = []
        for s in body:
            if isinstance(s, K.SharedArray):
                s = dataclasses.replace(s, offset=offsets[s.name])
            elif isinstance(s, K.For):
                s = dataclasses.replace(s, body=place(s.body))
            elif isinstance(s, K.If):
                s = dataclasses.replace(s, then=place(s.then), orelse=place(s.orelse))
            out.append(s)
        return tuple(out)

    return dataclasses.replace(func, body=place(func.body), dynamic_smem=-(-end // 16) * 16)
