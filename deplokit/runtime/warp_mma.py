"""What mma.sync and ldmatrix do to one warp's registers, as numpy functions.

Registers are arrays whose last two axes are (lane, element): `a[..., lane, i]` is element i
of lane's A fragment (any leading axes: blocks, warps). The lane -> element maps are the PTX
ISA's tables in deplokit.ir.fragments, so a program that puts an element in the wrong lane
gets a wrong product here as it would on the GPU.

Rounding. The tensor core reads a .tf32 operand's sign, exponent and top 10 mantissa bits
(the low 13 bits are ignored: `tf32_truncate`); programs round to tf32 first (deplokit's
round_tf32 is to nearest, ties to even: `tf32_round_even`; PTX's cvt.rna.tf32.f32 rounds ties
away from zero: `tf32_round`), after which the truncation changes nothing. Products of tf32 or
16-bit inputs are exact in float64 and so is their sum over one
instruction's k (at most 16 terms of 22-bit products plus C is within float64's 53 bits for
operands of like magnitude); the sum is rounded to float32 once. The hardware's internal
order and rounding of that sum is not specified by PTX, so results match it to within the
accumulator's last bits, not bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..ir.fragments import WARP, FragmentLayout, LdMatrixLayout, MmaShape, ldmatrix_layout, ptx_layout

_LOW13 = np.uint32(0x1FFF)


def tf32_truncate(x) -> np.ndarray:
    """The float32 values a .tf32 operand stands for: the low 13 mantissa bits dropped."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return (bits & ~_LOW13).view(np.float32)


def tf32_round(x) -> np.ndarray:
    """cvt.rna.tf32.f32: to the nearest tf32, ties away from zero (Inf and NaN kept)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & ~_LOW13     # magnitude bits: adding half an ulp rounds away
    return np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)


def tf32_round_even(x) -> np.ndarray:
    """To the nearest tf32, ties to even (Inf and NaN kept): deplokit's round_tf32, which every
    backend computes with integer operations on the bits so that they agree bit for bit."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & ~_LOW13
    return np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)


def _operand_values(shape: MmaShape, x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if shape.dtype == "tf32":
        return tf32_truncate(x)
    if shape.dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    return _bf16(x)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest, ties to even), as a 16-bit register holds it."""
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def half_bits(x, kind: str) -> np.ndarray:
    """The 16-bit patterns (as uint32) of half values held in float32: `kind` bf16 or f16.
    Values that are not exactly halves are rounded to nearest even first."""
    x = np.asarray(x, dtype=np.float32)
    if kind == "bf16":
        return (_bf16(x).view(np.uint32) >> np.uint32(16)).astype(np.uint32)
    if kind == "f16":
        return x.astype(np.float16).view(np.uint16).astype(np.uint32)
    raise ValueError(f"half kind {kind!r}; bf16 or f16")


def half_values(regs, kind: str) -> np.ndarray:
    """32-bit registers (..., n) of two packed halves each as their 2n values (float32):
    element 2j is register j's low 16 bits, 2j + 1 its high ones (PTX's packing)."""
    regs = np.asarray(regs, dtype=np.uint32)
    parts = np.stack([regs & np.uint32(0xFFFF), regs >> np.uint32(16)], -1)      # (..., n, 2)
    if kind == "bf16":
        vals = (parts << np.uint32(16)).astype(np.uint32).view(np.float32)
    elif kind == "f16":
        vals = parts.astype(np.uint16).view(np.float16).astype(np.float32)
    else:
        raise ValueError(f"half kind {kind!r}; bf16 or f16")
    return vals.reshape(regs.shape[:-1] + (2 * regs.shape[-1],))


def gather(layout: FragmentLayout, matrix: np.ndarray) -> np.ndarray:
    """Every lane's fragment of `matrix` (..., rows, cols): (..., 32, elements)."""
    rows = np.array([[rc[0] for rc in lane] for lane in layout.coords])
    cols = np.array([[rc[1] for rc in lane] for lane in layout.coords])
    return matrix[..., rows, cols]


def scatter(layout: FragmentLayout, frag: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The operand (..., rows, cols) that the lanes' fragments (..., 32, elements) make up.
    An element no lane holds, or one two lanes hold, is an error (a layout that is not a
    permutation)."""
    layout.lane_of()
    out = np.zeros(frag.shape[:-2] + (layout.rows, layout.cols), dtype=dtype)
    rows = np.array([[rc[0] for rc in lane] for lane in layout.coords])
    cols = np.array([[rc[1] for rc in lane] for lane in layout.coords])
    out[..., rows, cols] = frag
    return out


def mma_sync(shape: MmaShape, a, b, c, layouts=None) -> np.ndarray:
    """D = A @ B + C for every warp: a (..., 32, A elements), b (..., 32, B elements), c and the
    result (..., 32, 4) float32. `layouts` (A, B, C) defaults to PTX's: a test may plant others."""
    la, lb, lc = layouts or tuple(ptx_layout(shape, op) for op in "ABC")
    for arr, lay in ((a, la), (b, lb), (c, lc)):
        if np.shape(arr)[-2:] != (WARP, len(lay.coords[0])):
            raise ValueError(f"{shape.ptx()}: {lay.operand} registers of shape {np.shape(arr)}, "
                             f"want (..., {WARP}, {len(lay.coords[0])})")
    A = scatter(la, _operand_values(shape, a), np.float64)
    B = scatter(lb, _operand_values(shape, b), np.float64)
    C = scatter(lc, np.asarray(c, dtype=np.float32), np.float64)
    return gather(lc, (A @ B + C).astype(np.float32))


def ldmatrix(rows, num: int, trans: bool = False, layout: LdMatrixLayout | None = None) -> np.ndarray:
    """ldmatrix for every warp. rows (..., 32, W): the 16 bytes at the address each lane gives,
    as W = 8 16-bit elements or W = 4 32-bit words (lanes past 8*num give none: ignored).
    Returns (..., 32, num, 4 // (16 // W)...): register i of lane l as its units,
    (..., 32, num, 2) for 16-bit elements, (..., 32, num, 1) for words."""
    rows = np.asarray(rows)
    width = {8: 2, 4: 4}.get(rows.shape[-1])
    if rows.shape[-2] != WARP or width is None:
        raise ValueError(f"ldmatrix rows of shape {rows.shape}: want (..., 32, 8) halves or (..., 32, 4) words")
    lay = layout or ldmatrix_layout(num, trans, width)
    row_lane = {src: lane for lane, src in enumerate(lay.sources) if src is not None}
    per = lay.per_reg
    out = np.empty(rows.shape[:-2] + (WARP, num, per), dtype=rows.dtype)
    for lane in range(WARP):
        for reg, (mat, r, u) in enumerate(lay.receives[lane]):
            for j in range(per):
                if lay.trans:                    # unit u of rows r, r+1: a column of the matrix
                    out[..., lane, reg, j] = rows[..., row_lane[(mat, r + j)], u]
                else:
                    out[..., lane, reg, j] = rows[..., row_lane[(mat, r)], u + j]
    return out
