"""Flash attention on tensor cores (FlashAttention-2 on mma.sync m16n8k16): the record
fuse_attention stamps on a half flash kernel's plan (FlashPlan.mma) and the lowering
(passes/flash/flash_mma_lower.py) reads.

A warp owns 16 query rows of one head. S = Q K^T comes out of mma.sync as C fragments (Q's
A fragments held in registers for the whole kernel, K's B fragments read with ldmatrix from
the staged key tile); the online softmax runs on those accumulators in FP32 (a row's max and
sum over the 4 lanes of a quad: lanes 4g .. 4g+3 hold row g and g + 8); P is converted to
half and packed in the same lane as the A fragment of O += P V (fragments.accumulator_reuse),
V's B fragments read with ldmatrix.trans. The accesses are Loop IR's, over its loop variables,
so the lowering places every element of Q, K, V and the output by the program's own indices."""
from __future__ import annotations

from dataclasses import dataclass

from .fragments import SHAPES, accumulator_reuse, ptx_layout
from .index import Affine
from .loop_ir import Stmt


@dataclass(frozen=True)
class Access:
    tensor: str
    index: tuple[Affine, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FlashMma:
    kind: str                            # bf16 | f16: the mma's operand type
    key_tile: int                        # keys staged per tile (a multiple of 16)
    row_warps: int                       # warps per head along the query rows (16 rows each)
    group: int                           # query heads a block serves (sharing one K/V tile)
    rows: tuple[tuple[str, int], ...]    # Loop IR's row loops (batch.., heads, query): var, extent
    query: str
    heads: str                           # "" without heads (or one head a block)
    keys: tuple[str, int]                # the key loop: var, extent
    dot: tuple[str, int]                 # head_dim: var, extent
    col: tuple[str, int]                 # the value's column loop: var, extent
    q: Access
    k: Access
    v: Access
    score: tuple[Stmt, ...]              # the score from the dot product's sum `acc` (scale, masks)
    acc: str
    score_value: str                     # the score the softmax reads
    epilogue: tuple[Stmt, ...]           # after the key loop: the output row (loads of the locals, a loop)
    locals: tuple[str, str, str]         # row max, row sum, output row
    causal: bool                         # key tiles above the diagonal are not visited

    @property
    def warps(self) -> int:
        return self.row_warps * self.group

    @property
    def query_tile(self) -> int:
        return 16 * self.row_warps

    def text(self) -> str:
        heads = f" x {self.group} heads" if self.group > 1 else ""
        warps = f"{self.warps} warp{'s' if self.warps > 1 else ''}"
        return (f"on tensor cores: mma.sync m16n8k16 {self.kind}, {warps} of 16 query rows "
                f"({self.query_tile} rows{heads} a block), key tiles of {self.key_tile} via ldmatrix, "
                f"the softmax on the FP32 accumulators, P in registers as the A fragment of P @ V")

    def fragment_lines(self) -> list[str]:
        """Which lane holds which elements (PTX's tables, as the lowering reads them): Q is A,
        K and V are B, S and O are C, and P's A fragment is the same lane's S accumulators."""
        shape = SHAPES[f"m16n8k16.{self.kind}"]
        la, lb, lc = (ptx_layout(shape, op) for op in "ABC")
        lines = [f"  {la.text()}  (Q, P)", f"  {lb.text()}  (K, V)", f"  {lc.text()}  (S, O)"]
        try:
            lines.append("  " + accumulator_reuse(la, lc).text())
        except ValueError as e:
            lines.append(f"  P from the score accumulators: {e}")
        return lines
