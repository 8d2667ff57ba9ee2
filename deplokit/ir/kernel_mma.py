"""The Kernel-IR statements of the tensor cores (an advanced feature: passes/mma/mma_lower.py
emits them, passes/mma/cuda_mma.py prints them as CUDA, runtime/sim/mma.py runs them):
ldmatrix, the tf32 rounding and mma.sync. Each prints itself (`text`) and names its locals
(`LOCAL_FIELDS`) and the expressions beyond kernel_ir's usual fields (`MORE_EXPRS`), which
kernel_ir asks of a statement it does not know."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .kernel_ir import Expr, format_at, format_plain


@dataclass(frozen=True)
class LdMatrix:
    """ldmatrix.sync.aligned.m8n8.x`num`[.trans].shared.b16 into registers dst[index ..
    index + num): this lane gives the address of shared `array` element `offset`, the start of
    one 16-byte row (lanes 8i .. 8i+7 give the rows of matrix i); every lane receives PTX's
    elements of each matrix (deplokit.ir.fragments.ldmatrix_layout). A warp-wide instruction:
    all 32 lanes execute it together."""
    dst: str
    index: Expr
    num: int
    trans: bool
    array: str
    offset: Expr
    LOCAL_FIELDS = ("dst", "array")

    def text(self) -> str:
        return (f"{self.dst}[{format_plain(self.index)} +0..{self.num}] = ldmatrix.x{self.num}"
                f"{'.trans' if self.trans else ''} shared {format_at(self.array, self.offset)}")


@dataclass(frozen=True)
class Tf32Round:
    """dst[index] = cvt.rna.tf32.f32(dst[index]): to the nearest tf32, ties away from zero (one
    instruction; deplokit's round_tf32 elsewhere rounds ties to even: they differ only on exact
    ties, and the simulator models this one bit for bit)."""
    dst: str
    index: Expr
    LOCAL_FIELDS = ("dst",)

    def text(self) -> str:
        at = f"{self.dst}[{format_plain(self.index)}]"
        return f"{at} = cvt.rna.tf32({at})"


@dataclass(frozen=True)
class Mma:
    """One warp-wide mma.sync (`shape`, deplokit.ir.fragments.SHAPES): acc[acc_at .. +4) +=
    A @ B, A's fragment in a[a_at ..], B's in b[b_at ..] (register arrays; the offsets are
    compile-time constants once the register loops unroll)."""
    shape: str
    acc: str
    acc_at: Expr
    a: str
    a_at: Expr
    b: str
    b_at: Expr
    LOCAL_FIELDS = ("acc", "a", "b")
    MORE_EXPRS = ("acc_at", "a_at", "b_at")

    def text(self) -> str:
        return (f"{self.acc}[{format_plain(self.acc_at)} +0..4] += mma.{self.shape}("
                f"{self.a}[{format_plain(self.a_at)} +..], {self.b}[{format_plain(self.b_at)} +..])")


@dataclass(frozen=True)
class PackHalves:
    """dst[index] = two FP32 values rounded to `kind` (bf16 | f16, to nearest even) and packed
    in one 32-bit register, `lo` in the low 16 bits (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32):
    an A fragment register built in registers (flash attention's P, its query rows)."""
    dst: str
    index: Expr
    lo: Expr
    hi: Expr
    kind: str
    LOCAL_FIELDS = ("dst",)
    MORE_EXPRS = ("lo", "hi")

    def text(self) -> str:
        return (f"{self.dst}[{format_plain(self.index)}] = pack.{self.kind}x2({format_plain(self.lo)}, "
                f"{format_plain(self.hi)})")


MmaStmt = Union[LdMatrix, Tf32Round, Mma, PackHalves]
