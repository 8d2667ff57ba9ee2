"""Golden before/after tests of the whole-program passes: the Loop-IR passes of the pipeline
(decompose, lift, fuse, fuse_attention, split_reduce, dedup) and the Kernel-IR lowering passes
(LOWERING) and render, in the shape of tests/test_pass_007.py: the IR each pass is given,
pinned as text; the pass run alone with its knobs explicit; the text it must return; its
off knob where it has one; and that the interpreter of the stage it produces still gets
PyTorch's numbers. The IR given comes from the trace of a tiny program (tests/pass_golden.py)."""
import dataclasses

import pytest
from pass_golden import DEDUP, before, compiled, run_alone

from deplokit.ir import kernel_ir as K

# -- decompose ---------------------------------------------------------------------------------
BEFORE_DECOMPOSE = """\
rms_norm = rms_norm(x, p_weight, normalized_shape=(64,), eps=None) -> (4, 64) float32"""

# torch's rms_norm becomes Tensor-IR nodes: the squares summed over the row and divided by 64
# (the mean), plus eps (float32's epsilon: eps=None), rsqrt, broadcast back over the row, times
# x, then times the weight broadcast over the rows.
EXPECTED_DECOMPOSE = """\
sq = multiply(x, x) -> (4, 64) float32
ss = sum(sq, axis=-1) -> (4, 1) float32
ms = divide(ss, 64) -> (4, 1) float32
ms_eps = add(ms, 1.1920928955078125e-07) -> (4, 1) float32
rstd = rsqrt(ms_eps) -> (4, 1) float32
rstd_bc = rstd[i, na] -> (4, 64) float32
normed = multiply(x, rstd_bc) -> (4, 64) float32
p_weight_bc = p_weight[j] -> (4, 64) float32
rms_norm = multiply(normed, p_weight_bc) -> (4, 64) float32"""

# -- lift --------------------------------------------------------------------------------------
BEFORE_LIFT = """\
sq = multiply(x, x) -> (4, 64) float32
ss = sum(sq, axis=-1) -> (4, 1) float32
ms = divide(ss, 64) -> (4, 1) float32
ms_eps = add(ms, 1.1920928955078125e-07) -> (4, 1) float32
rstd = rsqrt(ms_eps) -> (4, 1) float32
rstd_bc = rstd[i, na] -> (4, 64) float32
normed = multiply(x, rstd_bc) -> (4, 64) float32
p_weight_bc = p_weight[j] -> (4, 64) float32
rms_norm = multiply(normed, p_weight_bc) -> (4, 64) float32"""

# Every Tensor-IR node becomes a loop nest of its own, storing its whole result (nothing fused
# yet): one kernel per node, each a free loop over its output (and a reduce loop for the mean).
EXPECTED_LIFT = """\
=== sq -> sq ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        v0 = multiply(in0, in0)
        sq[a0, a1] = v0

=== ss -> ss ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # reduce
        in0 = load sq[a0, a1]
        acc0 <- add(acc0, in0)
    ss[a0, 0] = acc0

=== ms -> ms ===
for a0 in 0..4:  # free
    in0 = load ss[a0, 0]
    v0 = divide(in0, 64)
    ms[a0, 0] = v0

=== ms_eps -> ms_eps ===
for a0 in 0..4:  # free
    in0 = load ms[a0, 0]
    v0 = add(in0, 1.1920928955078125e-07)
    ms_eps[a0, 0] = v0

=== rstd -> rstd ===
for a0 in 0..4:  # free
    in0 = load ms_eps[a0, 0]
    v0 = rsqrt(in0)
    rstd[a0, 0] = v0

=== rstd_bc -> rstd_bc ===
for a0 in 0..4:  # free
    in0 = load rstd[a0, 0]
    for a1 in 0..64:  # free
        rstd_bc[a0, a1] = in0

=== normed -> normed ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        in1 = load rstd_bc[a0, a1]
        v0 = multiply(in0, in1)
        normed[a0, a1] = v0

=== p_weight_bc -> p_weight_bc ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load p_weight[a1]
        p_weight_bc[a0, a1] = in0

=== rms_norm -> rms_norm ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load normed[a0, a1]
        in1 = load p_weight_bc[a0, a1]
        v0 = multiply(in0, in1)
        rms_norm[a0, a1] = v0"""

# -- fuse --------------------------------------------------------------------------------------
BEFORE_FUSE = """\
=== sq -> sq ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        v0 = multiply(in0, in0)
        sq[a0, a1] = v0

=== ss -> ss ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # reduce
        in0 = load sq[a0, a1]
        acc0 <- add(acc0, in0)
    ss[a0, 0] = acc0

=== ms -> ms ===
for a0 in 0..4:  # free
    in0 = load ss[a0, 0]
    v0 = divide(in0, 64)
    ms[a0, 0] = v0

=== ms_eps -> ms_eps ===
for a0 in 0..4:  # free
    in0 = load ms[a0, 0]
    v0 = add(in0, 1.1920928955078125e-07)
    ms_eps[a0, 0] = v0

=== rstd -> rstd ===
for a0 in 0..4:  # free
    in0 = load ms_eps[a0, 0]
    v0 = rsqrt(in0)
    rstd[a0, 0] = v0

=== rstd_bc -> rstd_bc ===
for a0 in 0..4:  # free
    in0 = load rstd[a0, 0]
    for a1 in 0..64:  # free
        rstd_bc[a0, a1] = in0

=== normed -> normed ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        in1 = load rstd_bc[a0, a1]
        v0 = multiply(in0, in1)
        normed[a0, a1] = v0

=== p_weight_bc -> p_weight_bc ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load p_weight[a1]
        p_weight_bc[a0, a1] = in0

=== rms_norm -> rms_norm ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load normed[a0, a1]
        in1 = load p_weight_bc[a0, a1]
        v0 = multiply(in0, in1)
        rms_norm[a0, a1] = v0"""

# The producers fold into their consumers: one kernel whose row loop reduces the squares, then
# a free loop recomputes x * rstd * weight; only the result is stored (the guard keeps no
# intermediate).
EXPECTED_FUSE = """\
=== merged_rms_norm -> rms_norm ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # reduce
        in0 = load x[a0, a1]
        v0 = multiply(in0, in0)
        acc0 <- add(acc0, v0)
    v1 = divide(acc0, 64)
    v2 = add(v1, 1.1920928955078125e-07)
    v3 = rsqrt(v2)
    for a2 in 0..64:  # free
        in1 = load x[a0, a2]
        in2 = load p_weight[a2]
        v4 = multiply(in1, v3)
        v5 = multiply(v4, in2)
        rms_norm[a0, a2] = v5"""

# -- fuse_attention ----------------------------------------------------------------------------
BEFORE_FUSE_ATTENTION = """\
=== merged_scaled -> scaled ===
for a0 in 0..64:  # free (M)
    for a1 in 0..64:  # free (N)
        for a2 in 0..32:  # reduce (K)
            in0 = load x0[0, 0, a0, a2]
            in1 = load x1[0, 0, a1, a2]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        v1 = multiply(acc0, 0.17677669529663687)  # epilogue (outside reduce)
        scaled[0, 0, a0, a1] = v1

=== merged_probs -> probs ===
for a0 in 0..64:  # free
    for a1 in 0..64:  # reduce
        in0 = load scaled[0, 0, a0, a1]
        acc0 <- max(acc0, in0)
    for a2 in 0..64:  # reduce
        in1 = load scaled[0, 0, a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    for a3 in 0..64:  # free
        in2 = load scaled[0, 0, a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        probs[0, 0, a0, a3] = v4

=== merged_scaled_dot_product_attention -> scaled_dot_product_attention ===
for a0 in 0..64:  # free (M)
    for a1 in 0..32:  # free (N)
        for a2 in 0..64:  # reduce (K)
            in0 = load probs[0, 0, a0, a2]
            in1 = load x2[0, 0, a2, a1]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        scaled_dot_product_attention[0, 0, a0, a1] = acc0"""

# The three kernels of attention (scores, softmax, probabilities @ v) become one flash kernel:
# each block owns a query tile and walks the keys in tiles with an online softmax.
EXPECTED_FUSE_ATTENTION = """\
=== flash_scaled_dot_product_attention -> scaled_dot_product_attention ===
local row_max[1]: one row of (64, 1) float32 at a time, on chip
local row_sum[1]: one row of (64, 1) float32 at a time, on chip
local row_out[32]: one row of (64, 32) float32 at a time, on chip
flash: a block owns 16 query rows (in registers, 2 threads a row; each lane the full scores of 8 keys of a tile (a transposing reduce: 1/2 shuffles a score, not 1), the softmax on those, P gathered back), keys and values in staged tiles of 16 (about 82 registers a thread fit the cap of 255 for 32 threads, 23 warps an SM; 1 lane a row: 178 registers, 11 warps an SM, under the goal of 16); 4 blocks on 132 SMs (32 rows x 1 head a block then 16 rows x 1 head a block); not more: no smaller query tile or head group remains
for a0 in 0..64:  # free
    row_max[a0, 0] = -inf
    row_sum[a0, 0] = 0
    for a1 in 0..32:  # free
        row_out[a0, a1] = 0
    for a2 in 0..64:  # serial
        for a3 in 0..32:  # reduce
            in0 = load x0[0, 0, a0, a3]
            in1 = load x1[0, 0, a2, a3]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        v1 = multiply(acc0, 0.17677669529663687)  # epilogue (outside reduce)
        in2 = load row_max[a0, 0]
        v2 = maximum(in2, v1)  # the running max
        v3 = equal(v2, -inf) -> bool
        v4 = where(v3, 0, v2)  # a row of masked keys keeps exp finite
        v5 = subtract(in2, v4)
        v6 = exp(v5)  # rescales what was summed under the old max
        v7 = subtract(v1, v4)
        v8 = exp(v7)
        in3 = load row_sum[a0, 0]
        v9 = multiply(in3, v6)
        v10 = add(v9, v8)
        row_sum[a0, 0] = v10
        row_max[a0, 0] = v2
        for a4 in 0..32:  # free
            in4 = load row_out[a0, a4]
            in5 = load x2[0, 0, a2, a4]
            v11 = multiply(in4, v6)
            v12 = multiply(v8, in5)
            v13 = add(v11, v12)
            row_out[a0, a4] = v13
    in6 = load row_sum[a0, 0]
    for a5 in 0..32:  # free
        in7 = load row_out[a0, a5]
        v14 = divide(in7, in6)
        scaled_dot_product_attention[0, 0, a0, a5] = v14"""

# -- split_reduce ------------------------------------------------------------------------------
BEFORE_SPLIT_REDUCE = """\
=== merged_softmax -> softmax ===
for a0 in 0..2:  # free
    for a1 in 0..20000:  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    for a2 in 0..20000:  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    for a3 in 0..20000:  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# 2 rows of 20 000 would keep 2 SMs busy: each row's two reductions split into 19 chunks of 1056,
# partial max then partial sums (rescaled) in workspaces, a stats kernel combining the 19
# partials in order, then the elementwise tail reading the stats. No atomics.
EXPECTED_SPLIT_REDUCE = """\
=== merged_softmax_part0 -> softmax_acc0_part ===
for a1s in 0..19:  # free
    for a0 in 0..2:  # free
        for a1c in 0..1056:  # reduce
            in0 = load x[a0, a1s * 1056 + a1c] pad 0
            a1c_in = less(a1s * 1056 + a1c, 20000) -> bool
            in0_g = where(a1c_in, in0, -inf)
            acc0 <- max(acc0, in0_g)
        softmax_acc0_part[a1s, a0] = acc0

=== merged_softmax_part1 -> softmax_acc1_part ===
for a2s in 0..19:  # free
    for a0 in 0..2:  # free
        for t in 0..19:  # reduce
            acc0_part = load softmax_acc0_part[t, a0]
            acc0 <- max(acc0, acc0_part)
        for a2c in 0..1056:  # reduce
            in1 = load x[a0, a2s * 1056 + a2c] pad 0
            v0 = subtract(in1, acc0)
            v1 = exp(v0)
            a2c_in = less(a2s * 1056 + a2c, 20000) -> bool
            v1_g = where(a2c_in, v1, 0)
            acc1 <- add(acc1, v1_g)
        softmax_acc1_part[a2s, a0] = acc1

=== merged_softmax_stats -> softmax_acc0, softmax_acc1 ===
for a0 in 0..2:  # free
    for t1 in 0..19:  # reduce
        acc0_part1 = load softmax_acc0_part[t1, a0]
        acc0 <- max(acc0, acc0_part1)
    for t2 in 0..19:  # reduce
        acc1_part = load softmax_acc1_part[t2, a0]
        acc1 <- add(acc1, acc1_part)
    softmax_acc0[a0] = acc0
    softmax_acc1[a0] = acc1

=== merged_softmax -> softmax ===
for a0 in 0..2:  # free
    for a3 in 0..20000:  # free
        acc0 = load softmax_acc0[a0]
        acc1 = load softmax_acc1[a0]
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# -- dedup -------------------------------------------------------------------------------------
BEFORE_DEDUP = """\
=== merged_add -> add ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        v0 = relu(in0)
        v1 = add(v0, 1)
        add[a0, a1] = v1

=== merged_add_1 -> add_1 ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load y[a0, a1]
        v0 = relu(in0)
        v1 = add(v0, 1)
        add_1[a0, a1] = v1"""

# relu(x) + 1 and relu(y) + 1 are one kernel structure: the second kernel goes, its launch
# reuses the first with y and its own output bound.
EXPECTED_DEDUP = """\
=== merged_add -> add ===
for a0 in 0..4:  # free
    for a1 in 0..64:  # free
        in0 = load x[a0, a1]
        v0 = relu(in0)
        v1 = add(v0, 1)
        add[a0, a1] = v1"""

# -- 001_materialize ---------------------------------------------------------------------------
BEFORE_001 = """\
=== merged_rms_norm -> rms_norm ===
Tile(axes=(a3:32=THREAD, a0:4=BLOCK)):
    x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:64@1))
    AsyncWait(x_smem)
    StridedLoop(a1 = a3 * 4; < 64; += 128):  # reduce unroll
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            v0 = multiply(in0, in0)
            acc0 <- add(acc0, v0)
    Combine(acc0, add, over=(a3,))
    v1 = divide(acc0, 64)
    v2 = add(v1, 1.1920928955078125e-07)
    v3 = rsqrt(v2)
    StridedLoop(a2 = a3 * 4; < 64; += 128):  # free unroll
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            in2 = load p_weight[a2 + a2v]  # float4
            v4 = multiply(in1, v3)
            v5 = multiply(v4, in2)
            rms_norm[a0, a2 + a2v] = v5  # float4"""

# The Tile IR becomes Kernel IR: thread and block indices, the row's lanes reduced by warp
# shuffles, the Stage left as a node for 002 to copy.
EXPECTED_001 = """\
=== merged_rms_norm grid=(4, 1, 1) block=(32, 1, 1) ===
# param x: const float[256]
# param p_weight: const float[64]
# param rms_norm: float[256]
int a3 = tid.x
int a0 = bid.x
stage x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:64@1))  # copied by 002_stage_copies
stage wait x_smem  # 002_stage_copies
float acc0 = 0
for a1 = a3 * 4; < 64; += 128:  # unroll
    in0_x, in0_y, in0_z, in0_w = shared float4 x_smem[a1]
    float v0_x = multiply(in0_x, in0_x)
    float v0_y = multiply(in0_y, in0_y)
    float v0_z = multiply(in0_z, in0_z)
    float v0_w = multiply(in0_w, in0_w)
    acc0 = add(acc0, v0_x)
    acc0 = add(acc0, v0_y)
    acc0 = add(acc0, v0_z)
    acc0 = add(acc0, v0_w)
acc0 = add(acc0, shfl_xor(acc0, 16))
acc0 = add(acc0, shfl_xor(acc0, 8))
acc0 = add(acc0, shfl_xor(acc0, 4))
acc0 = add(acc0, shfl_xor(acc0, 2))
acc0 = add(acc0, shfl_xor(acc0, 1))
float v1 = divide(acc0, 64)
float v2 = add(v1, 1.1920928955078125e-07)
float v3 = rsqrt(v2)
for a2 = a3 * 4; < 64; += 128:  # unroll
    in1_x, in1_y, in1_z, in1_w = shared float4 x_smem[a2]
    in2_x, in2_y, in2_z, in2_w = global float4 p_weight[a2]
    float v4_x = multiply(in1_x, v3)
    float v4_y = multiply(in1_y, v3)
    float v4_z = multiply(in1_z, v3)
    float v4_w = multiply(in1_w, v3)
    float v5_x = multiply(v4_x, in2_x)
    float v5_y = multiply(v4_y, in2_y)
    float v5_z = multiply(v4_z, in2_z)
    float v5_w = multiply(v4_w, in2_w)
    global float4 rms_norm[((a0 * 64) + a2)] = (v5_x, v5_y, v5_z, v5_w)"""

# -- 002_stage_copies --------------------------------------------------------------------------
BEFORE_002 = """\
=== merged_rms_norm grid=(4, 1, 1) block=(32, 1, 1) ===
# param x: const float[256]
# param p_weight: const float[64]
# param rms_norm: float[256]
int a3 = tid.x
int a0 = bid.x
stage x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:64@1))  # copied by 002_stage_copies
stage wait x_smem  # 002_stage_copies
float acc0 = 0
for a1 = a3 * 4; < 64; += 128:  # unroll
    in0_x, in0_y, in0_z, in0_w = shared float4 x_smem[a1]
    float v0_x = multiply(in0_x, in0_x)
    float v0_y = multiply(in0_y, in0_y)
    float v0_z = multiply(in0_z, in0_z)
    float v0_w = multiply(in0_w, in0_w)
    acc0 = add(acc0, v0_x)
    acc0 = add(acc0, v0_y)
    acc0 = add(acc0, v0_z)
    acc0 = add(acc0, v0_w)
acc0 = add(acc0, shfl_xor(acc0, 16))
acc0 = add(acc0, shfl_xor(acc0, 8))
acc0 = add(acc0, shfl_xor(acc0, 4))
acc0 = add(acc0, shfl_xor(acc0, 2))
acc0 = add(acc0, shfl_xor(acc0, 1))
float v1 = divide(acc0, 64)
float v2 = add(v1, 1.1920928955078125e-07)
float v3 = rsqrt(v2)
for a2 = a3 * 4; < 64; += 128:  # unroll
    in1_x, in1_y, in1_z, in1_w = shared float4 x_smem[a2]
    in2_x, in2_y, in2_z, in2_w = global float4 p_weight[a2]
    float v4_x = multiply(in1_x, v3)
    float v4_y = multiply(in1_y, v3)
    float v4_z = multiply(in1_z, v3)
    float v4_w = multiply(in1_w, v3)
    float v5_x = multiply(v4_x, in2_x)
    float v5_y = multiply(v4_y, in2_y)
    float v5_z = multiply(v4_z, in2_z)
    float v5_w = multiply(v4_w, in2_w)
    global float4 rms_norm[((a0 * 64) + a2)] = (v5_x, v5_y, v5_z, v5_w)"""

# The Stage becomes the copy the threads do (cp.async of float4s) and the wait and barrier
# before the first read of x_smem.
EXPECTED_002 = """\
=== merged_rms_norm grid=(4, 1, 1) block=(32, 1, 1) ===
# param x: const float[256]
# param p_weight: const float[64]
# param rms_norm: float[256]
int a3 = tid.x
int a0 = bid.x
shared float x_smem[64]
if tid.x < 16:
    int x_smem_i = tid.x
    cp.async 16B shared x_smem[x_smem_i * 4] <- global x[((a0 * 64) + (x_smem_i * 4))]
cp.async.commit
cp.async.wait 0
barrier
float acc0 = 0
for a1 = a3 * 4; < 64; += 128:  # unroll
    in0_x, in0_y, in0_z, in0_w = shared float4 x_smem[a1]
    float v0_x = multiply(in0_x, in0_x)
    float v0_y = multiply(in0_y, in0_y)
    float v0_z = multiply(in0_z, in0_z)
    float v0_w = multiply(in0_w, in0_w)
    acc0 = add(acc0, v0_x)
    acc0 = add(acc0, v0_y)
    acc0 = add(acc0, v0_z)
    acc0 = add(acc0, v0_w)
acc0 = add(acc0, shfl_xor(acc0, 16))
acc0 = add(acc0, shfl_xor(acc0, 8))
acc0 = add(acc0, shfl_xor(acc0, 4))
acc0 = add(acc0, shfl_xor(acc0, 2))
acc0 = add(acc0, shfl_xor(acc0, 1))
float v1 = divide(acc0, 64)
float v2 = add(v1, 1.1920928955078125e-07)
float v3 = rsqrt(v2)
for a2 = a3 * 4; < 64; += 128:  # unroll
    in1_x, in1_y, in1_z, in1_w = shared float4 x_smem[a2]
    in2_x, in2_y, in2_z, in2_w = global float4 p_weight[a2]
    float v4_x = multiply(in1_x, v3)
    float v4_y = multiply(in1_y, v3)
    float v4_z = multiply(in1_z, v3)
    float v4_w = multiply(in1_w, v3)
    float v5_x = multiply(v4_x, in2_x)
    float v5_y = multiply(v4_y, in2_y)
    float v5_z = multiply(v4_z, in2_z)
    float v5_w = multiply(v4_w, in2_w)
    global float4 rms_norm[((a0 * 64) + a2)] = (v5_x, v5_y, v5_z, v5_w)"""

# -- render ------------------------------------------------------------------------------------
BEFORE_RENDER = """\
=== merged_rms_norm grid=(4, 1, 1) block=(32, 1, 1) ===
# param x: const float[256]
# param p_weight: const float[64]
# param rms_norm: float[256]
int a3 = tid.x
int a0 = bid.x
shared float x_smem[64]
if tid.x < 16:
    int x_smem_i = tid.x
    cp.async 16B shared x_smem[x_smem_i * 4] <- global x[((a0 * 64) + (x_smem_i * 4))]
cp.async.commit
cp.async.wait 0
barrier
float acc0 = 0
for a1 = a3 * 4; < 64; += 128:  # unroll
    in0_x, in0_y, in0_z, in0_w = shared float4 x_smem[a1]
    float v0_x = multiply(in0_x, in0_x)
    float v0_y = multiply(in0_y, in0_y)
    float v0_z = multiply(in0_z, in0_z)
    float v0_w = multiply(in0_w, in0_w)
    acc0 = add(acc0, v0_x)
    acc0 = add(acc0, v0_y)
    acc0 = add(acc0, v0_z)
    acc0 = add(acc0, v0_w)
acc0 = add(acc0, shfl_xor(acc0, 16))
acc0 = add(acc0, shfl_xor(acc0, 8))
acc0 = add(acc0, shfl_xor(acc0, 4))
acc0 = add(acc0, shfl_xor(acc0, 2))
acc0 = add(acc0, shfl_xor(acc0, 1))
float v1 = divide(acc0, 64)
float v2 = add(v1, 1.1920928955078125e-07)
float v3 = rsqrt(v2)
for a2 = a3 * 4; < 64; += 128:  # unroll
    in1_x, in1_y, in1_z, in1_w = shared float4 x_smem[a2]
    in2_x, in2_y, in2_z, in2_w = global float4 p_weight[a2]
    float v4_x = multiply(in1_x, v3)
    float v4_y = multiply(in1_y, v3)
    float v4_z = multiply(in1_z, v3)
    float v4_w = multiply(in1_w, v3)
    float v5_x = multiply(v4_x, in2_x)
    float v5_y = multiply(v4_y, in2_y)
    float v5_z = multiply(v4_z, in2_z)
    float v5_w = multiply(v4_w, in2_w)
    global float4 rms_norm[((a0 * 64) + a2)] = (v5_x, v5_y, v5_z, v5_w)"""

# The Kernel IR printed as one CUDA translation unit: the same kernel, statement by statement.
EXPECTED_RENDER = """\
// Generated by deplokit from Kernel IR for sm_90: 1 kernel, launched in this order.
// Indices are non-negative ints, so C's truncating / and % are floor division and modulo;
// integer values are computed exactly at their width (long long, int), casts explicit.
// Build: nvcc -cubin -arch=sm_90 -O3 <this file>
// Program outputs: rms_norm

// merged_rms_norm: grid (4, 1, 1), block (32, 1, 1)
extern "C" __global__ __launch_bounds__(32) void merged_rms_norm(const float* __restrict__ x, const float* __restrict__ p_weight, float* __restrict__ rms_norm) {
    int a3 = threadIdx.x;
    int a0 = blockIdx.x;
    __shared__ __align__(16) float x_smem[64];
    if ((int)threadIdx.x < 16) {
        int x_smem_i = threadIdx.x;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n"
                     :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(&x_smem[x_smem_i * 4]))),
                        "l"(&x[a0 * 64 + x_smem_i * 4])
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\\n" ::: "memory");
    __syncthreads();
    float acc0 = 0.0f;
    #pragma unroll
    for (int a1 = a3 * 4; a1 < 64; a1 += 128) {
        const float4 in0_x_v4 = *reinterpret_cast<const float4*>(&x_smem[a1]);
        float in0_x = in0_x_v4.x;
        float in0_y = in0_x_v4.y;
        float in0_z = in0_x_v4.z;
        float in0_w = in0_x_v4.w;
        float v0_x = in0_x * in0_x;
        float v0_y = in0_y * in0_y;
        float v0_z = in0_z * in0_z;
        float v0_w = in0_w * in0_w;
        acc0 = acc0 + v0_x;
        acc0 = acc0 + v0_y;
        acc0 = acc0 + v0_z;
        acc0 = acc0 + v0_w;
    }
    acc0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 16);
    acc0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 8);
    acc0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 4);
    acc0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 2);
    acc0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 1);
    float v1 = acc0 / 64.0f;
    float v2 = v1 + 1.1920929e-07f;
    float v3 = rsqrtf(v2);
    #pragma unroll
    for (int a2 = a3 * 4; a2 < 64; a2 += 128) {
        const float4 in1_x_v4 = *reinterpret_cast<const float4*>(&x_smem[a2]);
        float in1_x = in1_x_v4.x;
        float in1_y = in1_x_v4.y;
        float in1_z = in1_x_v4.z;
        float in1_w = in1_x_v4.w;
        const float4 in2_x_v4 = *reinterpret_cast<const float4*>(&p_weight[a2]);
        float in2_x = in2_x_v4.x;
        float in2_y = in2_x_v4.y;
        float in2_z = in2_x_v4.z;
        float in2_w = in2_x_v4.w;
        float v4_x = in1_x * v3;
        float v4_y = in1_y * v3;
        float v4_z = in1_z * v3;
        float v4_w = in1_w * v3;
        float v5_x = v4_x * in2_x;
        float v5_y = v4_y * in2_y;
        float v5_z = v4_z * in2_z;
        float v5_w = v4_w * in2_w;
        *reinterpret_cast<float4*>(&rms_norm[a0 * 64 + a2]) = make_float4(v5_x, v5_y, v5_z, v5_w);
    }
}
"""

# -- fuse_rows ---------------------------------------------------------------------------------
BEFORE_FUSE_ROWS = """\
=== merged_scaled -> scaled ===
for a0 in 0..16:  # free (M)
    for a1 in 0..16:  # free (N)
        for a2 in 0..8:  # reduce (K)
            in0 = load x0[0, 0, a0, a2]
            in1 = load x1[0, 0, a1, a2]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        v1 = multiply(acc0, 0.35355339059327373)  # epilogue (outside reduce)
        scaled[0, 0, a0, a1] = v1

=== merged_probs -> probs ===
for a0 in 0..16:  # free
    for a1 in 0..16:  # reduce
        in0 = load scaled[0, 0, a0, a1]
        acc0 <- max(acc0, in0)
    for a2 in 0..16:  # reduce
        in1 = load scaled[0, 0, a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    for a3 in 0..16:  # free
        in2 = load scaled[0, 0, a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        probs[0, 0, a0, a3] = v4

=== merged_scaled_dot_product_attention -> scaled_dot_product_attention ===
for a0 in 0..16:  # free (M)
    for a1 in 0..8:  # free (N)
        for a2 in 0..16:  # reduce (K)
            in0 = load probs[0, 0, a0, a2]
            in1 = load x2[0, 0, a2, a1]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        scaled_dot_product_attention[0, 0, a0, a1] = acc0"""

# The three kernels of attention become one whose row loop computes a row of scores, its
# softmax and the row of the output: scaled and probs are `local` rows of 16 on chip, never
# stored to global memory (the knob by_cost=False: fused without the byte-count check).
EXPECTED_FUSE_ROWS = """\
=== merged_scaled_dot_product_attention -> scaled_dot_product_attention ===
local scaled[16]: one row of (1, 1, 16, 16) float32 at a time, on chip
local probs[16]: one row of (1, 1, 16, 16) float32 at a time, on chip
for a0 in 0..16:  # free
    for a1 in 0..16:  # free
        for a2 in 0..8:  # reduce
            in0 = load x0[0, 0, a0, a2]
            in1 = load x1[0, 0, a1, a2]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
        v1 = multiply(acc0, 0.35355339059327373)  # epilogue (outside reduce)
        scaled[0, 0, a0, a1] = v1
    for a3 in 0..16:  # reduce
        in2 = load scaled[0, 0, a0, a3]
        acc1 <- max(acc1, in2)
    for a4 in 0..16:  # reduce
        in3 = load scaled[0, 0, a0, a4]
        v2 = subtract(in3, acc1)
        v3 = exp(v2)
        acc2 <- add(acc2, v3)
    for a5 in 0..16:  # free
        in4 = load scaled[0, 0, a0, a5]
        v4 = subtract(in4, acc1)
        v5 = exp(v4)
        v6 = divide(v5, acc2)
        probs[0, 0, a0, a5] = v6
    for a6 in 0..8:  # free
        for a7 in 0..16:  # reduce
            in5 = load probs[0, 0, a0, a7]
            in6 = load x2[0, 0, a7, a6]
            v7 = multiply(in5, in6)
            acc3 <- add(acc3, v7)
        scaled_dot_product_attention[0, 0, a0, a6] = acc3"""

CASES = [
    ('decompose', 'rms_norm', BEFORE_DECOMPOSE, EXPECTED_DECOMPOSE,
     {}, None,
     None, 'tensor'),
    ('lift', 'rms_norm', BEFORE_LIFT, EXPECTED_LIFT,
     {}, None,
     None, 'loop'),
    ('fuse', 'rms_norm', BEFORE_FUSE, EXPECTED_FUSE,
     {}, None,
     None, 'loop'),
    ('fuse_attention', 'attention', BEFORE_FUSE_ATTENTION, EXPECTED_FUSE_ATTENTION,
     {'enable': True, 'by_cost': True}, {'enable': False, 'by_cost': True},
     'attention fusion disabled by the knob', 'loop'),
    ('split_reduce', 'softmax_few_rows', BEFORE_SPLIT_REDUCE, EXPECTED_SPLIT_REDUCE,
     {'splits': 'auto'}, {'splits': 1},
     'off (splits=1)', 'loop'),
    ('dedup', 'twice', BEFORE_DEDUP, EXPECTED_DEDUP,
     {}, None,
     None, 'loop'),
    ('001_materialize', 'rms_norm', BEFORE_001, EXPECTED_001,
     {}, None,
     None, 'sim'),
    ('002_stage_copies', 'rms_norm', BEFORE_002, EXPECTED_002,
     {}, None,
     None, 'sim'),
    ('render', 'rms_norm', BEFORE_RENDER, EXPECTED_RENDER,
     {}, None,
     None, 'sim'),
    ('fuse_rows', 'attention_rows', BEFORE_FUSE_ROWS, EXPECTED_FUSE_ROWS,
     {'enable': True, 'by_cost': False}, {'enable': False, 'by_cost': False},
     'row fusion disabled by the knob', 'loop'),
]
IDS = [c[0] for c in CASES]


def config(name, knobs):
    return {f"{name}.{k}": v for k, v in knobs.items()}


@pytest.mark.parametrize("name, program, given, expected, knobs, off, off_reason, backend", CASES, ids=IDS)
def test_pass_alone_rewrites_the_given_ir(name, program, given, expected, knobs, off, off_reason, backend):
    ir = before(program, name)
    assert str(ir) == given
    step = run_alone(name, ir, config(name, knobs), dedup=program in DEDUP)
    assert str(step.after) == expected and step.skipped_reason == ""


@pytest.mark.parametrize("name, program, given, expected, knobs, off, off_reason, backend",
                         [c for c in CASES if c[5] is not None], ids=[c[0] for c in CASES if c[5] is not None])
def test_pass_off_by_its_knob(name, program, given, expected, knobs, off, off_reason, backend):
    ir = before(program, name)
    step = run_alone(name, ir, config(name, off))
    assert step.after == ir and step.skipped_reason == off_reason


def test_dedup_is_off_unless_asked():
    ir = before("twice", "dedup")
    step = run_alone("dedup", ir, {}, dedup=False)
    assert step.after == ir and step.skipped_reason.startswith("off: every kernel is scheduled")


@pytest.mark.parametrize("name, program, backend", [(c[0], c[1], c[7]) for c in CASES], ids=IDS)
def test_the_interpreter_still_matches_torch_after_the_pass(name, program, backend):
    # the stage the pass produces, run by its own interpreter (tensor, loop) or the simulator
    assert compiled(program).check(backend=backend).ok


# -- 003_unclash_names, on a hand-written kernel (the lowering never names a local after a
# parameter or a C keyword: test_defect_c_names.py) ----------------------------------------------
CLASHING = """\
=== k grid=(1, 1, 1) block=(4, 1, 1) ===
# param x: const float[4]
# param out: float[4]
float x = global x[tid.x]
float int = x
global out[tid.x] = int"""

# The local `x` meets the parameter x and `int` is a C keyword: both renamed (x_1, int_1), every
# use with them; the parameters keep their names (launches bind them by name).
UNCLASHED = """\
=== k grid=(1, 1, 1) block=(4, 1, 1) ===
# param x: const float[4]
# param out: float[4]
float x_1 = global x[tid.x]
float int_1 = x_1
global out[tid.x] = int_1"""


def clashing_program():
    tid = K.Special("tid.x")
    kernel = K.KernelFunc("k", (K.Param("x", size=4), K.Param("out", const=False, size=4)), (1, 1, 1), (4, 1, 1),
                          (K.Declare("x", "float", K.GlobalLoad("x", tid)), K.Declare("int", "float", K.Var("x")),
                           K.GlobalStore("out", tid, K.Var("int"))))
    return dataclasses.replace(before("rms_norm", "003_unclash_names"), kernels=(kernel,))


def test_004_renames_the_locals_that_clash():
    program = clashing_program()
    assert str(program) == CLASHING
    step = run_alone("003_unclash_names", program, {})
    assert str(step.after) == UNCLASHED
    assert step.notes == ("k: locals int, x renamed (they met a parameter's name or C's)",)
    # on the pipeline's own kernels it changes nothing
    rms = before("rms_norm", "003_unclash_names")
    assert run_alone("003_unclash_names", rms, {}).after == rms


# -- 004_reconverge_warps, on the flash kernel of a lane-split row (head_dim 128, 4 lanes a row):
# its key loop has thread 0 issue the next K/V tiles (an `if`), then the lanes transpose their
# partial dot products by shuffles (flash scatter). The pass puts one `syncwarp` after the copy
# branch, before the first shuffle, in the same loop body; nothing else moves. Pinned as the diff it makes (the
# flash kernel is 88 lines; test_flash_registers.py checks the CUDA and the SASS side).
RECONVERGED = """\
@@ -52,6 +52,7 @@
                 float v0 = multiply(in0, select((a4vv == 0), in1_x, select((a4vv == 1), in1_y, select((a4vv == 2), in1_z, in1_w))))
                 acc0 = add(acc0, v0)
         s_tile[a3i] = acc0
+    syncwarp
     s_tile[0] = add(select(((a4l & 2) != 0), s_tile[8], s_tile[0]), shfl_xor(select(((a4l & 2) != 0), s_tile[0], s_tile[8]), 2))
     s_tile[1] = add(select(((a4l & 2) != 0), s_tile[9], s_tile[1]), shfl_xor(select(((a4l & 2) != 0), s_tile[1], s_tile[9]), 2))
     s_tile[2] = add(select(((a4l & 2) != 0), s_tile[10], s_tile[2]), shfl_xor(select(((a4l & 2) != 0), s_tile[2], s_tile[10]), 2))"""


def test_005_puts_a_syncwarp_between_the_copy_branch_and_the_shuffles():
    import difflib

    from test_flash_registers import _compile
    c = _compile(8, 2, 64, 64, 128, 128, False)
    (given,) = [s.before for s in c.trace if s.name == "004_reconverge_warps"]
    step = run_alone("004_reconverge_warps", given, {})
    diff = difflib.unified_diff(str(given).splitlines(), str(step.after).splitlines(), lineterm="", n=3)
    assert "\n".join(list(diff)[2:]) == RECONVERGED
    assert c.check(backend="sim").ok
    # a kernel without a warp shuffle after a divergent branch is left alone
    rms = before("rms_norm", "004_reconverge_warps")
    assert run_alone("004_reconverge_warps", rms, {}).after == rms


GOLDEN = set(IDS) | {"003_unclash_names", "004_reconverge_warps"}
