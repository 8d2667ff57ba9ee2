"""Kernel IR's tensor-map TMA (sm_90): the copy statement and the kernel parameter it reads
(re-exported by kernel_ir, which they belong to; kept apart so that each module stays small).
`Expr` is kernel_ir's expression type, named in annotations only (no import: no cycle)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TmaTensorLoad:
    """cp.async.bulk.tensor (sm_90): the box of tensor map `tensor_map` (a TensorMap of the
    kernel) whose first element is at `coords` (element coordinates, outermost dimension
    first; elements outside the tensor read 0) into shared `array` at element `dst_offset`,
    written swizzled as the map says, completing the box's bytes on mbarrier `barrier`.
    Issued by one thread."""
    array: str
    dst_offset: Expr
    tensor_map: str
    coords: tuple[Expr, ...]
    barrier: str
    slot: Expr | None = None       # which mbarrier of the array `barrier` (a ring's full[slot])
    expect: bool = True            # the copy announces its own bytes (False: the ring's arrival does)


@dataclass(frozen=True)
class TensorMap:
    """A `const __grid_constant__ CUtensorMap` parameter of a kernel (after its buffers): how
    TmaTensorLoads copy boxes of global buffer `buffer` (row-major `shape`, float32) into
    shared memory. The host encodes it for the device buffer (runtime/tensor_map.py)."""
    name: str
    buffer: str
    shape: tuple[int, ...]        # the buffer's dims, outermost first
    box: tuple[int, ...]          # one copy's extent per dim, outermost first
    swizzle: int = 0              # bytes (0, 32, 64, 128): deplokit.ir.swizzle

    @property
    def box_bytes(self) -> int:
        n = 4
        for b in self.box:
            n *= b
        return n
