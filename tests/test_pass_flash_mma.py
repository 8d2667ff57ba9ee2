"""001 tileify on a half flash kernel stamped for tensor cores (FlashPlan.mma): its Tile IR is
what the kernel does, spelled from the record (passes/flash/flash_mma_tile.py), not the FFMA
schedule. The pattern of test_pass_007.py: the Loop IR given (fuse_attention's flash kernel,
pinned as text so the example stays the one meant), the Tile IR 001 must return, as text;
then what the text promises checked against the kernel the record lowers to (the same mma
and ldmatrix count a key tile, the quad shuffles), the later Tile passes leaving it alone,
and the knob that keeps the FFMA schedule."""
import torch

import deplokit
from deplokit.ir.kernel_ir import walk_stmts
from deplokit.ir.kernel_mma import LdMatrix, Mma
from deplokit.ir.tile_ir import FragmentLoad, Loop, MmaSync, walk
from deplokit.passes.schedule.t001_tileify import PASS, as_tile_program
from deplokit.passes.verify import verify
from deplokit.target import get_target

F = torch.nn.functional

# one head, 20 rows (not a multiple of 16: keys past T score -inf), head_dim 16, causal, bf16
BEFORE = """\
=== flash_scaled_dot_product_attention_bf16 -> scaled_dot_product_attention_bf16 ===
local row_max[1]: one row of (20, 1) float32 at a time, on chip
local row_sum[1]: one row of (20, 1) float32 at a time, on chip
local row_out[16]: one row of (20, 16) float32 at a time, on chip
flash: on tensor cores: mma.sync m16n8k16 bf16, 1 warp of 16 query rows (16 rows a block), key tiles of 16 via ldmatrix, the softmax on the FP32 accumulators, P in registers as the A fragment of P @ V; key tiles above the causal diagonal skipped
for a0 in 0..20:  # free
    row_max[a0, 0] = -inf
    row_sum[a0, 0] = 0
    for a1 in 0..16:  # free
        row_out[a0, a1] = 0
    for a2 in 0..20:  # serial
        for a3 in 0..16:  # reduce
            in0 = load q[0, 0, a0, a3]
            in1 = load k[0, 0, a2, a3]
            v0 = convert(in0) -> float32  # prologue (inside reduce)
            v1 = convert(in1) -> float32
            v2 = multiply(v0, v1)
            acc0 <- add(acc0, v2)
        v3 = greater(a2, a0) -> bool  # epilogue (outside reduce)
        v4 = multiply(acc0, 0.25)
        v5 = where(v3, -inf, v4)
        in2 = load row_max[a0, 0]
        v6 = maximum(in2, v5)  # the running max
        v7 = equal(v6, -inf) -> bool
        v8 = where(v7, 0, v6)  # a row of masked keys keeps exp finite
        v9 = subtract(in2, v8)
        v10 = exp(v9)  # rescales what was summed under the old max
        v11 = subtract(v5, v8)
        v12 = exp(v11)
        in3 = load row_sum[a0, 0]
        v13 = multiply(in3, v10)
        v14 = add(v13, v12)
        row_sum[a0, 0] = v14
        row_max[a0, 0] = v6
        for a4 in 0..16:  # free
            in4 = load row_out[a0, a4]
            in5 = load v[0, 0, a2, a4]
            v15 = convert(in5) -> float32  # prologue (inside reduce)
            v16 = multiply(in4, v10)
            v17 = multiply(v12, v15)
            v18 = add(v16, v17)
            row_out[a0, a4] = v18
    in6 = load row_sum[a0, 0]
    for a5 in 0..16:  # free
        in7 = load row_out[a0, a5]
        v19 = divide(in7, in6)
        v20 = convert(v19) -> bfloat16  # epilogue (outside reduce)
        scaled_dot_product_attention_bf16[0, 0, a0, a5] = v20"""

# A warp of 16 query rows, lane 4 fm_g + fm_t: Q's A fragments read once; per key tile a
# cp.async ring of K and V (padded rows), S = Q K^T on mma.sync from ldmatrix'd B fragments,
# the score and the online softmax on the FP32 C fragments (a row half's max over the quad:
# Combine over fm_t), P converted to half in the same lane's A fragment, O += P V from
# ldmatrix.trans'd V. Key tiles past the block's last row are not visited (`while`).
EXPECTED = """\
=== flash_scaled_dot_product_attention_bf16 -> scaled_dot_product_attention_bf16 ===
flash: on tensor cores: mma.sync m16n8k16 bf16, 1 warp of 16 query rows (16 rows a block), key tiles of 16 via ldmatrix, the softmax on the FP32 accumulators, P in registers as the A fragment of P @ V; key tiles above the causal diagonal skipped
  fragment A m16n8k16.bf16 16x16: lane 4g+t holds a0=(g, 2t) a1=(g, 2t+1) a2=(g+8, 2t) a3=(g+8, 2t+1) a4=(g, 2t+8) a5=(g, 2t+9) a6=(g+8, 2t+8) a7=(g+8, 2t+9)  (Q, P)
  fragment B m16n8k16.bf16 16x8: lane 4g+t holds b0=(2t, g) b1=(2t+1, g) b2=(2t+8, g) b3=(2t+9, g)  (K, V)
  fragment C m16n8k16.bf16 16x8: lane 4g+t holds c0=(g, 2t) c1=(g, 2t+1) c2=(g+8, 2t) c3=(g+8, 2t+1)  (S, O)
  P fragment A m16n8k16.bf16 <- score accumulators S0..S1 (C 16x8), same lane: a0=S0.c0 a1=S0.c1 a2=S0.c2 a3=S0.c3 a4=S1.c0 a5=S1.c1 a6=S1.c2 a7=S1.c3
register q_frag[1, 8]
register s_tile[2, 4]
register p_frag[1, 8]
register row_max[2]
register row_sum[2]
register row_out[2, 4]
Tile(axes=(fm_g:8=THREAD, fm_t:4=THREAD, fm_qb:2=BLOCK)):
    for fm_kk in 0..1:  # register unroll
        for fm_e in 0..8:  # register unroll
            q_in = load q[0, 0, fm_qb * 16 + fm_g + (fm_e // 2 % 2) * 8, fm_t * 2 + (fm_e % 2) + (fm_e // 4) * 8 + fm_kk * 16]
            q_frag[fm_kk, fm_e] := q_in
    for fm_h in 0..2:  # register unroll
        row_max[fm_h] := -inf
        row_sum[fm_h] := 0
    for fm_n in 0..2:  # register unroll
        for fm_c in 0..4:  # register unroll
            row_out[fm_n, fm_c] := 0
    for fm_kt in 0..2 while fm_kt < fm_qb + 1:  # serial
        AsyncWait(k_smem, v_smem)
        k_smem = AsyncBufferedStage(k, origin=(0, 0, fm_kt * 16, 0), slab=(fm_key:16@2, fm_col:16@3), pad=8, prefetch=1, bfloat16)
        v_smem = AsyncBufferedStage(v, origin=(0, 0, fm_kt * 16, 0), slab=(fm_key:16@2, fm_col:16@3), pad=8, prefetch=1, bfloat16)
        for fm_n in 0..2:  # register unroll
            for fm_c in 0..4:  # register unroll
                s_tile[fm_n, fm_c] := 0
        for fm_kk in 0..1:  # reduce unroll
            for fm_jp in 0..1:  # register unroll
                k_frag[0 +0..2] = fragment B k_smem[fc + fm_jp * 16, fm_kk * 16 + fr]  # ldmatrix.x4
                for fm_j in 0..2:  # register unroll
                    s_tile[fm_jp * 2 + fm_j] <- mma.m16n8k16.bf16(q_frag[fm_kk], k_frag[fm_j])
        for fm_n in 0..2:  # register unroll
            for fm_c in 0..4:  # register unroll
                acc0 = load s_tile[fm_n, fm_c]
                v3 = greater(fm_kt * 16 + fm_n * 8 + fm_t * 2 + (fm_c % 2), fm_qb * 16 + fm_g + (fm_c // 2) * 8) -> bool  # epilogue (outside reduce)
                v4 = multiply(acc0, 0.25)
                v5 = where(v3, -inf, v4)
                key_ok = less(fm_kt * 16 + fm_n * 8 + fm_t * 2 + (fm_c % 2), 20) -> bool
                score_ok = where(key_ok, v5, -inf)  # a key past the last scores -inf
                s_tile[fm_n, fm_c] := score_ok
        for fm_h in 0..2:  # register unroll
            tile_max := -inf
            for fm_n in 0..2:  # register unroll
                for fm_cc in 0..2:  # register unroll
                    s_key = load s_tile[fm_n, fm_h * 2 + fm_cc]
                    tile_max_k = maximum(tile_max, s_key)
                    tile_max := tile_max_k
            Combine(tile_max, max, over=(fm_t,))
            max_old = load row_max[fm_h]
            max_new = maximum(max_old, tile_max)  # the running max, this tile included
            unseen = equal(max_new, -inf) -> bool
            max_base = where(unseen, 0, max_new)  # a row of masked keys keeps exp finite
            rescale_d = subtract(max_old, max_base)
            rescale = exp(rescale_d)  # what was summed under the old max, rescaled once per tile
            sum_old = load row_sum[fm_h]
            sum_rescaled = multiply(sum_old, rescale)
            row_sum[fm_h] := sum_rescaled
            for fm_n in 0..2:  # register unroll
                for fm_cc in 0..2:  # register unroll
                    out_old = load row_out[fm_n, fm_h * 2 + fm_cc]
                    out_rescaled = multiply(out_old, rescale)
                    row_out[fm_n, fm_h * 2 + fm_cc] := out_rescaled
            for fm_n in 0..2:  # register unroll
                for fm_cc in 0..2:  # register unroll
                    s_key = load s_tile[fm_n, fm_h * 2 + fm_cc]
                    p_d = subtract(s_key, max_base)
                    p_key = exp(p_d)
                    s_tile[fm_n, fm_h * 2 + fm_cc] := p_key
                    sum_acc = load row_sum[fm_h]
                    sum_key = add(sum_acc, p_key)  # this lane's part of the row
                    row_sum[fm_h] := sum_key
            row_max[fm_h] := max_new
        for fm_ks in 0..1:  # register unroll
            for fm_jj in 0..2:  # register unroll
                for fm_c in 0..4:  # register unroll
                    p = load s_tile[fm_ks * 2 + fm_jj, fm_c]
                    p_half = convert(p) -> bfloat16
                    p_frag[fm_ks, fm_jj * 4 + fm_c] := p_half
        for fm_ks in 0..1:  # reduce unroll
            for fm_n2 in 0..1:  # register unroll
                v_frag[0 +0..2] = fragment B v_smem[fm_ks * 16 + fr, fm_n2 * 16 + fc]  # ldmatrix.x4.trans
                for fm_j in 0..2:  # register unroll
                    row_out[fm_n2 * 2 + fm_j] <- mma.m16n8k16.bf16(p_frag[fm_ks], v_frag[fm_j])
    for fm_h in 0..2:  # register unroll
        sum_part = load row_sum[fm_h]
        row_total := sum_part
        Combine(row_total, add, over=(fm_t,))
        row_sum[fm_h] := row_total
        in6 = load row_sum[fm_h]
        for fm_n in 0..2:  # register unroll
            for fm_cc in 0..2:  # register unroll
                in7 = load row_out[fm_n, fm_h * 2 + fm_cc]
                v19 = divide(in7, in6)
                v20 = convert(v19) -> bfloat16  # epilogue (outside reduce)
                scaled_dot_product_attention_bf16[0, 0, fm_qb * 16 + fm_g + fm_h * 8, fm_n * 8 + fm_t * 2 + fm_cc] = v20"""


def _compile(config=None, target="sm_80"):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 20, 16).to(torch.bfloat16) for _ in range(3))
    return deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
                            target=target, config=config or {})


def _runs(body, kind):
    """How many times statements of `kind` run for one value of the enclosing loops of `body`."""
    n = 0
    for s, loops in walk(body):
        if isinstance(s, kind):
            m = 1
            for lp in loops:
                m *= lp.extent
            n += m
    return n


def test_001_spells_the_tensor_core_flash_kernel():
    c = _compile()
    loop_kernel = c.loop_ir.kernels[0]
    assert str(loop_kernel) == BEFORE
    tiles = as_tile_program(c.loop_ir)
    after, note = PASS.apply_to(tiles.kernels[0], get_target("sm_80"), {}, tiles.types())
    assert str(after) == EXPECTED and note == ""
    assert str(c.tile_ir.kernels[0]) == EXPECTED        # no later Tile pass rewrites it
    verify(c.tile_ir, get_target("sm_80"))


def test_the_tile_ir_counts_the_kernels_instructions():
    # per key tile: head_dim / 16 k steps x 2 key groups for S, 16 / 16 x 2 value tiles for O
    c = _compile()
    kern = c.tile_ir.kernels[0]
    key_loop = next(s for s, _ in walk(kern.tile().body) if isinstance(s, Loop) and s.var == "fm_kt")
    mmas = [s for s in walk_stmts(c.kernel_ir.kernels[0].body) if isinstance(s, Mma)]
    ldsm = [s for s in walk_stmts(c.kernel_ir.kernels[0].body) if isinstance(s, LdMatrix)]
    assert _runs(key_loop.body, MmaSync) == len(mmas) == 4
    assert _runs(key_loop.body, FragmentLoad) == len(ldsm) == 2
    assert {s.via for s, _ in walk(key_loop.body) if isinstance(s, FragmentLoad)} == \
        {"ldmatrix.x4", "ldmatrix.x4.trans"}
    skipped = {s.name: [d.skipped for d in s.decisions] for s in c.trace}
    assert all("001 tileify spells its whole schedule" in why for why in skipped["007_stage_inputs"] +
               skipped["015_pipeline_k_outer"])
    assert c.check(backend="sim").passed


def test_mma_off_keeps_the_ffma_schedule():
    c = _compile({"fuse_attention.mma": "off"})
    kern = c.tile_ir.kernels[0]
    assert kern.flash.mma is None and "on tensor cores" not in str(kern)
    assert not any(isinstance(s, (MmaSync, FragmentLoad)) for s, _ in walk(kern.tile().body))
