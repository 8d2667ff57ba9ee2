"""What 008's wgmma path needs of a matmul, in one place (008 decides with it, the lowering
builds the descriptors from it, so a kernel only promises what the instruction can read).

A warpgroup (4 warps, 128 threads) computes 64 rows x N with one wgmma.mma_async m64nNk16 per
k step of 16; the block's warpgroups stack along M, so the block tile is 64 rows per warpgroup
by N (a multiple of 8 up to 256). The operands stay in shared memory, where TMA (011) wrote
them as boxes whose stored rows are one swizzle span (012: 32, 64 or 128 bytes, the row of
the box), read through a matrix descriptor:

  * K-major (the row holds K: A = x[m, k], or B = w[n, k] of `x @ w.T`): 8-row groups
    8 * span bytes apart (the stride byte offset); a k step moves the start 32 bytes along
    the row; the leading offset is unused (16).
  * MN-major (B = w[k, n] of `x @ w`, row-major K x N: the descriptor's transpose bit, for
    16-bit types only): each stored row (one k) holds span / 2 consecutive n, 8 rows of k
    make a group 8 * span bytes apart; a wider N tile (128: two boxes of 64 columns side by
    side, tma_geometry) is swizzle atoms of span / 2 columns, the leading offset (one box's
    bytes) apart, as PTX's canonical MN-major layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) has it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.fragments import WARPGROUP, WGMMA_NS
from ...ir.index import Var, const, free_vars, substitute
from ...ir.tile_ir import Stage
from ..tma.tma_geometry import tensor_map_box

FR, FC = "fr", "fc"
SPANS = (32, 64, 128)         # bytes: a stored row, the swizzle the box must be written in
HALF_BYTES = 2


@dataclass(frozen=True)
class OperandLayout:
    """How a wgmma operand lies in its stage: `mn_major` (else K-major), rows of `span`
    bytes (the swizzle), the descriptor's leading and stride byte offsets."""
    mn_major: bool
    span: int
    leading: int
    stride: int


def wgmma_block_reason(threads: int, block_m: int, block_n: int) -> str:
    """'' when a block of `threads` computing block_m x block_n is whole warpgroups of 64 x N."""
    if threads % WARPGROUP:
        return f"the block's {threads} threads are not whole warpgroups of {WARPGROUP}"
    if block_m != 64 * (threads // WARPGROUP):
        return f"a block tile of {block_m} rows is not 64 per warpgroup ({threads // WARPGROUP} warpgroups)"
    if block_n not in WGMMA_NS:
        return f"an N tile of {block_n} is not a multiple of 8 up to 256"
    return ""


def _coef(e, name: str) -> int:
    return sum(c for atom, c in e.terms if isinstance(atom, Var) and atom.name == name)


def operand_layout(operand: str, stage: Stage, at, n: int) -> tuple[OperandLayout | None, str]:
    """(the layout, '') of wgmma operand `operand` (A: 64 x 16, B: 16 x n) whose element
    (fr, fc) is `stage`[at], or (None, why wgmma cannot read it)."""
    name = f"{operand} ({stage.name})"
    if stage.element_bytes != HALF_BYTES:
        return None, f"{name} holds {stage.element_bytes}-byte elements; wgmma reads bf16/f16 tiles"
    if stage.pad:
        return None, f"{name}'s rows are padded (a descriptor reads whole swizzle rows)"
    if len(at) < 2:
        return None, f"{name} is a slab of one axis"
    inner, row = at[-1], at[-2]
    fv_inner, fv_row = free_vars(inner), free_vars(row)
    along = None
    for a, b in ((FC, FR), (FR, FC)):
        if _coef(inner, a) == 1 and b not in fv_inner and _coef(row, b) == 1 and a not in fv_row:
            along = a
    if along is None or any({FR, FC} & free_vars(e) for e in at[:-2]):
        return None, f"{name}'s elements do not run along its slab's rows and columns"
    k_along = FC if operand == "A" else FR
    mn_major = along != k_along
    if operand == "A" and mn_major:
        return None, f"{name} is stored M-major; wgmma reads A K-major from shared memory"
    width = stage.slab[-1].extent * HALF_BYTES
    # an MN-major row wider than the widest span is TMA boxes of one span side by side
    # (tma_geometry.tensor_map_box): swizzle atoms `leading` bytes apart along N
    span = SPANS[-1] if mn_major and width > SPANS[-1] and width % SPANS[-1] == 0 else width
    if span not in SPANS:
        return None, f"{name}'s rows are {span} bytes, no swizzle span ({', '.join(map(str, SPANS))})"
    if mn_major and n * HALF_BYTES > width:
        return None, (f"B stored N-major in rows of {width} bytes holds {width // HALF_BYTES} columns, "
                      f"not the N tile's {n}")
    rows = stage.size // stage.slab[-1].extent
    start = substitute(inner, {FR: const(0), FC: const(0)})
    if start.const % 16 or any(c % 16 for _, c in start.terms):
        return None, f"{name}'s k steps do not start on 16-element columns"
    if mn_major and width > span and (start.const or start.terms):
        return None, f"{name}'s N tile does not start at its first box"
    return OperandLayout(mn_major, span, rows * span if mn_major else 16, 8 * span), ""


def tma_reason(stage: Stage, shape, dtype: str) -> str:
    """'' when 011 can copy the (half) stage with one tensor map, else why not."""
    return tensor_map_box(stage, shape, dtype)[1]
