"""The Kernel-IR statements of Hopper's warpgroup MMA (an advanced feature: passes/wgmma/
cuda_wgmma.py prints them as CUDA, runtime/sim/wgmma.py runs them): the shared-memory matrix
descriptor, wgmma.fence, wgmma.mma_async, commit_group and wait_group, and setmaxnreg
(the warp-specialised schedule's register split). Each prints itself
(`text`) and names its locals (`LOCAL_FIELDS`) and the expressions beyond kernel_ir's usual
fields (`MORE_EXPRS`), which kernel_ir asks of a statement it does not know."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .kernel_ir import Expr, KernelFunc, format_at, format_plain, walk_stmts


@dataclass(frozen=True)
class WgmmaDescriptor:
    """uint64 `name` = the shared-memory matrix descriptor (PTX ISA "Matrix Descriptor
    Format", deplokit.ir.fragments.descriptor_bits) of an operand tile (K-major; or MN-major,
    the Wgmma's b_mn_major, deplokit.ir.fragments.mnmajor_byte) of shared
    `array` from element `offset`: start address, leading and stride byte offsets, swizzle.
    The stride byte offset steps from one 8-row group to the next; the leading one from one
    8-element K column of core matrices to the next (unused when a K step of 16 halves fits
    in the swizzle span)."""
    name: str
    array: str
    offset: Expr
    leading_bytes: int
    stride_bytes: int
    swizzle: int = 128             # bytes (0, 32, 64, 128): deplokit.ir.swizzle
    LOCAL_FIELDS = ("name", "array")

    def text(self) -> str:
        swz = f"swizzle {self.swizzle}B" if self.swizzle else "no swizzle"
        return (f"u64 {self.name} = smem_desc(shared {format_at(self.array, self.offset)}, "
                f"leading {self.leading_bytes}B, stride {self.stride_bytes}B, {swz})")


@dataclass(frozen=True)
class WgmmaFence:
    """wgmma.fence.sync.aligned: register and shared-memory writes before it are seen by the
    warpgroup's following wgmma.mma_async (warpgroup-wide)."""

    def text(self) -> str:
        return "wgmma.fence"


@dataclass(frozen=True)
class Wgmma:
    """One warpgroup-wide (128 threads) wgmma.mma_async.sync.aligned.m64n`n`k16.f32.`dtype`:
    the 64 x n accumulator, fragment in acc[acc_at .. + n/2) (deplokit.ir.fragments.
    wgmma_accumulator), += A (64 x 16, descriptor `a_desc`) @ B (16 x n, K-major: stored n x 16,
    descriptor `b_desc`), both read from shared memory. Asynchronous: its results are
    defined only after a WgmmaWait covering its commit group."""
    n: int
    dtype: str                     # bf16 | f16
    acc: str
    acc_at: Expr
    a_desc: str
    b_desc: str
    # B stored MN-major (a row-major K x N tile, N contiguous): PTX's imm-trans-b = 1
    b_mn_major: bool = False
    LOCAL_FIELDS = ("acc", "a_desc", "b_desc")
    MORE_EXPRS = ("acc_at",)

    def text(self) -> str:
        b = f"smem {self.b_desc}" + (" MN-major" if self.b_mn_major else "")
        return (f"{self.acc}[{format_plain(self.acc_at)} +0..{self.n // 2}] += wgmma.m64n{self.n}k16."
                f"{self.dtype}(smem {self.a_desc}, {b}) async")


@dataclass(frozen=True)
class WgmmaCommit:
    """wgmma.commit_group.sync.aligned: the warpgroup's uncommitted wgmmas form one group."""

    def text(self) -> str:
        return "wgmma.commit_group"


@dataclass(frozen=True)
class WgmmaWait:
    """wgmma.wait_group.sync.aligned `pending`: wait until at most `pending` groups are in flight."""
    pending: int

    def text(self) -> str:
        return f"wgmma.wait_group {self.pending}"


@dataclass(frozen=True)
class SetMaxNReg:
    """setmaxnreg.{inc,dec}.sync.aligned.u32 `count` (sm_90a): the executing warpgroup's
    threads hold `count` registers each from here on, taken from (inc) or given back to (dec)
    the block's pool; whole warpgroups (ir/warp_roles.py has the rules)."""
    count: int
    inc: bool

    def text(self) -> str:
        return f"setmaxnreg.{'inc' if self.inc else 'dec'} {self.count}"


WgmmaStmt = Union[WgmmaDescriptor, WgmmaFence, Wgmma, WgmmaCommit, WgmmaWait, SetMaxNReg]


def uses_wgmma(k: KernelFunc) -> bool:
    """Whether `k` issues wgmma: nvcc then compiles it for the architecture-specific target
    (sm_90a), the only one whose PTX has wgmma."""
    return any(isinstance(s, Wgmma) for s in walk_stmts(k.body))
