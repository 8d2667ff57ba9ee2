"""Tensor-core fragments (deplokit.ir.fragments) and the warp semantics of mma.sync and ldmatrix
(deplokit.runtime.warp_mma): the PTX tables, checked against lanes the ISA spells out and against
numpy's matmul; a planted wrong layout computes a wrong product."""
import dataclasses

import numpy as np
import pytest

from deplokit.ir.fragments import M16N8K8_TF32, M16N8K16_BF16, M16N8K16_F16, FragmentLayout, ldmatrix_layout, ptx_layout
from deplokit.runtime.warp_mma import gather, ldmatrix, mma_sync, tf32_round, tf32_round_even, tf32_truncate

SHAPES = (M16N8K8_TF32, M16N8K16_F16, M16N8K16_BF16)


def test_ptx_lanes_spelled_out():
    """Lanes from the ISA's figures (g = lane >> 2, t = lane % 4)."""
    a = ptx_layout(M16N8K8_TF32, "A").coords
    assert a[0] == ((0, 0), (8, 0), (0, 4), (8, 4))
    assert a[5] == ((1, 1), (9, 1), (1, 5), (9, 5))
    assert ptx_layout(M16N8K8_TF32, "B").coords[6] == ((2, 1), (6, 1))
    a16 = ptx_layout(M16N8K16_F16, "A").coords
    assert a16[7] == ((1, 6), (1, 7), (9, 6), (9, 7), (1, 14), (1, 15), (9, 14), (9, 15))
    assert ptx_layout(M16N8K16_BF16, "B").coords[31] == ((6, 7), (7, 7), (14, 7), (15, 7))
    assert ptx_layout(M16N8K16_F16, "C").coords[30] == ((7, 4), (7, 5), (15, 4), (15, 5))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_layouts_are_permutations(shape):
    for op in "ABC":
        lay = ptx_layout(shape, op)
        assert len(lay.lane_of()) == lay.rows * lay.cols


def test_fragment_text_from_table():
    assert ptx_layout(M16N8K8_TF32, "A").text() == (
        "fragment A m16n8k8.tf32 16x8: lane 4g+t holds a0=(g, t) a1=(g+8, t) a2=(g, t+4) a3=(g+8, t+4)")
    assert ptx_layout(M16N8K8_TF32, "C").text() == (
        "fragment C m16n8k8.tf32 16x8: lane 4g+t holds c0=(g, 2t) c1=(g, 2t+1) c2=(g+8, 2t) c3=(g+8, 2t+1)")
    assert ptx_layout(M16N8K16_F16, "B").text() == (
        "fragment B m16n8k16.f16 16x8: lane 4g+t holds b0=(2t, g) b1=(2t+1, g) b2=(2t+8, g) b3=(2t+9, g)")
    table = ptx_layout(M16N8K8_TF32, "B").table().splitlines()
    assert table[1].split()[:3] == ["0", "L0.b0", "L4.b0"]


def _wrong_a(shape):
    """A's layout with elements 1 and 2 swapped in every lane (a classic slip)."""
    lay = ptx_layout(shape, "A")
    coords = tuple((e[0], e[2], e[1]) + e[3:] for e in lay.coords)
    return dataclasses.replace(lay, coords=coords)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_mma_sync_is_matmul(shape):
    rng = np.random.default_rng(0)
    A = rng.integers(-8, 8, (3, shape.m, shape.k)).astype(np.float32) / 4       # exact in every dtype
    B = rng.integers(-8, 8, (3, shape.k, shape.n)).astype(np.float32) / 4
    C = rng.standard_normal((3, shape.m, shape.n)).astype(np.float32)
    a, b, c = (gather(ptx_layout(shape, op), x) for op, x in zip("ABC", (A, B, C)))
    d = mma_sync(shape, a, b, c)
    want = gather(ptx_layout(shape, "C"), (A.astype(np.float64) @ B + C).astype(np.float32))
    np.testing.assert_array_equal(d, want)
    # the same registers read with a planted wrong A layout: a different product
    wrong = (_wrong_a(shape), ptx_layout(shape, "B"), ptx_layout(shape, "C"))
    assert not np.allclose(mma_sync(shape, a, b, c, layouts=wrong), want)


def test_mma_sync_refuses_non_permutation():
    lay = ptx_layout(M16N8K8_TF32, "A")
    dup = dataclasses.replace(lay, coords=(lay.coords[1],) + lay.coords[1:])
    regs = np.zeros((32, 4), np.float32)
    with pytest.raises(ValueError, match="held twice"):
        mma_sync(M16N8K8_TF32, regs, np.zeros((32, 2), np.float32), regs,
                 layouts=(dup, ptx_layout(M16N8K8_TF32, "B"), ptx_layout(M16N8K8_TF32, "C")))


def test_tf32_rounding():
    x = np.array([1 + 2 ** -11, 1 + 2 ** -11 + 2 ** -20, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), np.inf, 3.0],
                 dtype=np.float32)
    # ties away from zero: 1 + 2^-11 is half a tf32 ulp (2^-10) above 1
    np.testing.assert_array_equal(tf32_round(x), np.array([1 + 2 ** -10, 1 + 2 ** -10, 1 + 2 * 2 ** -10,
                                                           -(1 + 2 ** -10), np.inf, 3.0], np.float32))
    np.testing.assert_array_equal(tf32_truncate(x)[:3], np.float32([1, 1, 1 + 2 ** -10]))
    assert np.isnan(tf32_round(np.float32([np.nan])))[0]
    # deplokit's round_tf32: ties to even (1 + 2^-11 goes down to 1, 1 + 3 * 2^-11 up)
    np.testing.assert_array_equal(tf32_round_even(x)[[0, 1, 2, 4]],
                                  np.float32([1, 1 + 2 ** -10, 1 + 2 * 2 ** -10, np.inf]))


def _addr_rows(smem, row_of_lane, col_of_lane, width):
    """The W units each lane's row address points at: smem[row, col:col+W]."""
    return np.stack([smem[..., r, c:c + width] for r, c in zip(row_of_lane, col_of_lane)], axis=-2)


def test_ldmatrix_x4_loads_tf32_a_fragment():
    """A 16 x 8 fp32 tile in shared memory, row-major: x4 of words gives a0..a3 in PTX's order
    when lane l points at row l % 8 + 8 * (l // 8 % 2), word 4 * (l // 16)."""
    A = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    rows = [l % 8 + 8 * (l // 8 % 2) for l in range(32)]
    cols = [4 * (l // 16) for l in range(32)]
    regs = ldmatrix(_addr_rows(A, rows, cols, 4), 4)
    np.testing.assert_array_equal(regs[..., 0], gather(ptx_layout(M16N8K8_TF32, "A"), A))
    # lanes swapped in the address map: not the fragment
    bad = ldmatrix(_addr_rows(A, [r ^ 1 for r in rows], cols, 4), 4)
    assert not np.array_equal(bad[..., 0], gather(ptx_layout(M16N8K8_TF32, "A"), A))


def test_ldmatrix_f16_a_and_trans_b():
    A = np.arange(16 * 16, dtype=np.float16).reshape(16, 16)
    rows = [l % 8 + 8 * (l // 8 % 2) for l in range(32)]
    cols = [8 * (l // 16) for l in range(32)]
    regs = ldmatrix(_addr_rows(A, rows, cols, 8), 4)             # (32, 4 regs, 2 halves)
    np.testing.assert_array_equal(regs.reshape(32, 8), gather(ptx_layout(M16N8K16_F16, "A"), A))
    # B stored k-major ([k][n], 16 x 8): .trans x2 makes the col fragment
    B = np.arange(16 * 8, dtype=np.float16).reshape(16, 8)
    regs = ldmatrix(_addr_rows(B, [l % 16 for l in range(32)], [0] * 32, 8), 2, trans=True)
    np.testing.assert_array_equal(regs.reshape(32, 4), gather(ptx_layout(M16N8K16_F16, "B"), B))
    # .x1 ignores lanes 8..31's addresses
    one = ldmatrix(_addr_rows(B, [l % 8 if l < 8 else 15 for l in range(32)], [0] * 32, 8), 1)
    want = gather(ptx_layout(M16N8K16_F16, "A"), np.pad(B[:8], ((0, 8), (0, 8))))[:, :2]
    np.testing.assert_array_equal(one.reshape(32, 2), want)


def test_ldmatrix_layout_text_and_refusals():
    assert ldmatrix_layout(4, width=4).text() == (
        "ldmatrix.x4: lane 8i+r gives row r of matrix i; register i of lane 4g+t gets row g, b32 t of matrix i")
    assert ldmatrix_layout(2, trans=True).ptx() == "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"
    with pytest.raises(ValueError, match="x3"):
        ldmatrix_layout(3)
    with pytest.raises(ValueError, match="not transposed"):
        ldmatrix_layout(2, trans=True, width=4)
    assert isinstance(ptx_layout(M16N8K8_TF32, "C"), FragmentLayout)
