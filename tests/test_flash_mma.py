"""Attention's register reuse on tensor cores (FlashAttention-2), at the warp level with the
simulator's mma.sync: S = Q K^T leaves C fragments; the online softmax runs on them in FP32
(row max and sum within a lane, then across the 4 lanes of a quad, as shfl.xor 1 and 2 do);
P is read straight out of the same lane's accumulators as the A fragment of the P @ V mma
(`accumulator_reuse`, derived from PTX's tables). A warp's 16 query rows over odd key counts
match the float64 softmax within bf16/fp16 tolerance; a planted wrong reuse map fails, and a
C layout under which P would cross lanes is refused."""
import dataclasses

import numpy as np
import pytest

from deplokit.ir.fragments import SHAPES, WARP, accumulator_reuse, ptx_layout
from deplokit.runtime.warp_mma import gather, mma_sync, scatter

KINDS = ["bf16", "f16"]


def _quad(x, op):
    """x (32,) per lane -> op over the 4 lanes of each quad (lanes 4g .. 4g+3), every lane."""
    return np.repeat(op(x.reshape(8, 4), axis=1), 4)


def _warp_attention(q, k, v, kind, sources=None, causal_from=None):
    """One warp's 16 query rows of softmax(q k^T) v, key tiles of 16, everything in fragments."""
    shape = SHAPES[f"m16n8k16.{kind}"]
    la, lb, lc = (ptx_layout(shape, op) for op in "ABC")
    reuse = sources or accumulator_reuse(la, lc).sources
    d, dv, n_keys = q.shape[1], v.shape[1], k.shape[0]
    pad = -(-n_keys // 16) * 16
    kp = np.zeros((pad, d), np.float32)
    vp = np.zeros((pad, dv), np.float32)
    kp[:n_keys], vp[:n_keys] = k, v
    rows_of = np.array([[rc[0] for rc in lane] for lane in lc.coords])            # (32, 4)
    cols_of = np.array([[rc[1] for rc in lane] for lane in lc.coords])
    m = np.full((WARP, 2), -np.inf, np.float32)      # row g and g + 8 of every lane
    l = np.zeros((WARP, 2), np.float32)
    o = np.zeros((dv // 8, WARP, 4), np.float32)
    for t0 in range(0, pad, 16):
        s = np.zeros((2, WARP, 4), np.float32)
        for j in range(2):
            for k0 in range(0, d, 16):
                a = gather(la, q[:, k0:k0 + 16])
                b = gather(lb, kp[t0 + 8 * j:t0 + 8 * j + 8, k0:k0 + 16].T)
                s[j] = mma_sync(shape, a, b, s[j])
            key = t0 + 8 * j + cols_of
            dead = key >= n_keys
            if causal_from is not None:
                dead |= key > causal_from + rows_of
            s[j] = np.where(dead, -np.inf, s[j])
        new_m = m.copy()
        p = np.empty_like(s)
        for h in range(2):                       # elements c0, c1: row g; c2, c3: row g + 8
            part = s[:, :, 2 * h:2 * h + 2]
            new_m[:, h] = np.maximum(m[:, h], _quad(part.max(axis=(0, 2)), np.max))
            p[:, :, 2 * h:2 * h + 2] = np.exp(part - new_m[None, :, h, None])
            scale = np.exp(m[:, h] - new_m[:, h])
            l[:, h] = l[:, h] * scale + _quad(p[:, :, 2 * h:2 * h + 2].sum(axis=(0, 2)), np.sum)
            o[:, :, 2 * h:2 * h + 2] *= scale[None, :, None]
        m = new_m
        a_p = np.stack([p[j][:, c] for j, c in reuse], axis=-1)                 # (32, 8): no lane crossing
        for nt in range(dv // 8):
            b_v = gather(lb, vp[t0:t0 + 16, 8 * nt:8 * nt + 8])
            o[nt] = mma_sync(shape, a_p, b_v, o[nt])
    o = o / np.repeat(l, 2, axis=1)[None]
    return np.concatenate([scatter(lc, o[nt]) for nt in range(dv // 8)], axis=1)


def _half(x, kind):
    return x.astype(np.float16).astype(np.float32) if kind == "f16" else \
        (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _reference(q, k, v, causal_from=None):
    s = q.astype(np.float64) @ k.astype(np.float64).T
    if causal_from is not None:
        s = np.where(np.arange(k.shape[0])[None] > causal_from + np.arange(16)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def _inputs(n_keys, d, kind, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (_half(rng.standard_normal(shape).astype(np.float32) * sc, kind)
               for shape, sc in (((16, d), d ** -0.5), ((n_keys, d), 1.0), ((n_keys, d), 1.0)))
    return q, k, v


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_keys,d,causal", [(37, 64, False), (100, 64, True), (37, 128, False)])
def test_warp_flash_on_fragments_matches_softmax(kind, n_keys, d, causal):
    q, k, v = _inputs(n_keys, d, kind, seed=n_keys + d)
    start = n_keys - 16 if causal else None       # the warp's rows are the last 16 queries
    got = _warp_attention(q, k, v, kind, causal_from=start)
    want = _reference(q, k, v, causal_from=start)
    # P rounded to half for the PV mma: its relative error, over a convex combination of v
    unit = 2.0 ** -8 if kind == "bf16" else 2.0 ** -11
    assert np.abs(got - want).max() <= 2 * unit * np.abs(v).max()


def test_reuse_map_is_derived_from_ptx_tables():
    for kind in KINDS:
        shape = SHAPES[f"m16n8k16.{kind}"]
        reuse = accumulator_reuse(ptx_layout(shape, "A"), ptx_layout(shape, "C"))
        assert reuse.sources == ((0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3))
        assert "a4=S1.c0" in reuse.text()


def test_planted_wrong_reuse_map_fails():
    q, k, v = _inputs(37, 64, "bf16", seed=1)
    want = _reference(q, k, v)
    # the two score tiles exchanged: P's keys 0..7 and 8..15 read from each other's accumulators
    planted = ((1, 0), (1, 1), (1, 2), (1, 3), (0, 0), (0, 1), (0, 2), (0, 3))
    bad = _warp_attention(q, k, v, "bf16", sources=planted)
    assert np.abs(bad - want).max() > 0.05


def test_a_layout_that_crosses_lanes_is_refused():
    shape = SHAPES["m16n8k16.bf16"]
    lc = ptx_layout(shape, "C")
    # the C table with neighbouring lanes swapped: P's elements would sit in the other lane
    swapped = dataclasses.replace(lc, coords=tuple(lc.coords[lane ^ 1] for lane in range(WARP)))
    with pytest.raises(ValueError, match="cross lanes"):
        accumulator_reuse(ptx_layout(shape, "A"), swapped)
    with pytest.raises(ValueError, match="accumulator tiles"):
        accumulator_reuse(ptx_layout(SHAPES["m16n8k8.tf32"], "A"), ptx_layout(SHAPES["m16n8k8.tf32"], "B"))
