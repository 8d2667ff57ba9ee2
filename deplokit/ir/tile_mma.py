"""Tile IR's tensor-core statements, which 008 register_tile writes when its mma knob is on
(passes/mma/mma_tile.py, passes/wgmma/wgmma_tile.py) in place of a register tile's
multiply-adds: a warp's operand fragments read from a staged slab (FragmentLoad), one
mma.sync per 16 x 8 output tile (MmaSync), or a warpgroup's wgmma.mma_async on operands left
in shared memory (WarpgroupMma). The kernel's MmaTile (ir/fragments.py) says which instruction
and which lane holds what; the lowering is passes/mma/mma_lower.py and
passes/wgmma/wgmma_lower.py."""
from __future__ import annotations

from dataclasses import dataclass

from .index import Affine, format_index


@dataclass(frozen=True)
class FragmentLoad:
    """dst[index] = this warp's fragment of mma operand A or B, read from a staged slab: `at` is
    the slab index of element (fr, fc) of the operand's 16 x k (A) or k x 8 (B) tile, and every
    lane reads the elements the kernel's MmaTile layout gives it (`via`: ldmatrix.xN[.trans],
    one instruction for the warp, or lds, a shared load per element), converted to the mma's
    input type (cvt.rna.tf32.f32 for tf32)."""
    dst: str
    index: tuple[Affine, ...]      # the fragment's slot in its register array
    operand: str                   # A | B
    stage: str
    at: tuple[Affine, ...]
    via: str                       # ldmatrix.x4 | ldmatrix.x2 | ldmatrix.x2.trans ... | lds
    # an ldmatrix of `tiles` adjacent operand tiles (along n for B, m for A) at once, into
    # slots index .. index + tiles - 1: the second tile's rows come from lanes 16..31
    tiles: int = 1

    def text(self) -> str:
        slots = f" +0..{self.tiles}" if self.tiles > 1 else ""
        return (f"{self.dst}[{format_index(self.index)}{slots}] = fragment {self.operand} "
                f"{self.stage}[{format_index(self.at)}]  # {self.via}")


@dataclass(frozen=True)
class MmaSync:
    """acc[index] <- A @ B + acc[index] for one 16 x 8 output tile of the warp: one mma.sync
    over the fragments a[a_index], b[b_index] (the kernel's MmaTile says which instruction)."""
    acc: str
    index: tuple[Affine, ...]
    a: str
    a_index: tuple[Affine, ...]
    b: str
    b_index: tuple[Affine, ...]
    shape: str                     # m16n8k8.tf32 ...

    def text(self) -> str:
        return (f"{self.acc}[{format_index(self.index)}] <- mma.{self.shape}({self.a}[{format_index(self.a_index)}], "
                f"{self.b}[{format_index(self.b_index)}])")


@dataclass(frozen=True)
class WarpgroupMma:
    """acc[index +0..n/2] += A @ B for one k step of 16 of a warpgroup's 64 x n tile: one
    wgmma.mma_async m64n`n`k16 (sm_90a, the kernel's MmaTile.wgmma) on operands that stay in
    shared memory. `a_at` is the slab index of element (fr, fc) of the warpgroup's 64 x 16 A
    tile in stage `a`, `b_at` that of element (fr, fc) of the 16 x n B tile in stage `b`; the
    lowering builds each operand's matrix descriptor from the stage's layout (K-major, or B
    MN-major when its rows run along n) and fences, commits and waits around the K loop."""
    acc: str
    index: tuple[Affine, ...]
    n: int
    dtype: str                     # bf16 | f16
    a: str
    a_at: tuple[Affine, ...]
    b: str
    b_at: tuple[Affine, ...]

    def text(self) -> str:
        return (f"{self.acc}[{format_index(self.index)} +0..{self.n // 8}] <- wgmma.m64n{self.n}k16.{self.dtype}("
                f"smem {self.a}[{format_index(self.a_at)}], smem {self.b}[{format_index(self.b_at)}])")
