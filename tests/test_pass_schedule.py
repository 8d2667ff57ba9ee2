"""Golden before/after tests of the Tile-IR scheduling passes (SCHEDULE), in the shape of
tests/test_pass_007.py (007 itself is there): the Tile IR each pass is given, pinned as text;
the pass run alone with every knob explicit; the Tile IR it must return; the decision it
stamps; the knob that turns it off; and, through check_passes, that the simulator still
gets PyTorch's numbers after it. The IR given comes from the pipeline's trace of a tiny
program (tests/pass_golden.py) and is pinned, so a change upstream shows up as a BEFORE
mismatch, not as a silent change of the example."""
import pytest
from pass_golden import before, check_passes, decisions, run_alone

# -- 001_tileify -------------------------------------------------------------------------------
BEFORE_001 = """\
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

# The outer free loop over the 4 rows becomes a THREAD axis of the Tile; the body is untouched
# (001 has no knob and applies to every kernel: it is the Loop IR -> Tile IR step).
EXPECTED_001 = """\
=== merged_rms_norm -> rms_norm ===
Tile(axes=(a0:4=THREAD)):
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

# -- 002_chunk_matmul_k ------------------------------------------------------------------------
BEFORE_002 = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0(M):32=THREAD, a1(N):32=THREAD)):
    for a2 in 0..64:  # reduce (K)
        in0 = load a[a0, a2]
        in1 = load b[a2, a1]
        v0 = multiply(in0, in1)
        acc0 <- add(acc0, v0)
    matmul[a0, a1] = acc0"""

# The K reduce of 64 splits into K-outer (4 chunks) x K-inner (16): both loads index K as
# a2o * 16 + a2i; nothing else moves (k_chunk has no off value: every matmul is chunked).
EXPECTED_002 = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0(M):32=THREAD, a1(N):32=THREAD)):
    for a2o in 0..4:  # reduce (K)
        for a2i in 0..16:  # reduce (K)
            in0 = load a[a0, a2o * 16 + a2i]
            in1 = load b[a2o * 16 + a2i, a1]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    matmul[a0, a1] = acc0"""

# -- 003_split_matmul_k ------------------------------------------------------------------------
BEFORE_003 = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0(M):16=THREAD, a1(N):16=THREAD)):
    for a2o in 0..64:  # reduce (K)
        for a2i in 0..16:  # reduce (K)
            in0 = load a[a0, a2o * 16 + a2i]
            in1 = load b[a2o * 16 + a2i, a1]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    matmul[a0, a1] = acc0"""

# 16 x 16 outputs and K = 1024 (64 chunks): 4 splits make the K chunks a BLOCK axis a2s, each
# block summing 16 chunks into a partials tensor [4, 16, 16]; a second kernel adds the 4
# partials of each output in split order (deterministic: no atomics).
EXPECTED_003 = """\
=== merged_matmul -> merged_matmul_partials ===
split-K 4 into merged_matmul_partials, reduced by merged_matmul_reduce  # deterministic
Tile(axes=(a0(M):16=THREAD, a1(N):16=THREAD, a2s(K):4=BLOCK)):
    for a2o in 0..16:  # reduce (K)
        for a2i in 0..16:  # reduce (K)
            in0 = load a[a0, a2s * 256 + a2o * 16 + a2i]
            in1 = load b[a2s * 256 + a2o * 16 + a2i, a1]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    merged_matmul_partials[a2s, a0, a1] = acc0

=== merged_matmul_reduce -> matmul ===
reduces merged_matmul  # its split-K partial sums, in split order
Tile(axes=(a0(M):16=THREAD, a1(N):16=THREAD)):
    acc0_p0 = load merged_matmul_partials[0, a0, a1]
    acc0_p1 = load merged_matmul_partials[1, a0, a1]
    acc0_s1 = add(acc0_p0, acc0_p1)
    acc0_p2 = load merged_matmul_partials[2, a0, a1]
    acc0_s2 = add(acc0_s1, acc0_p2)
    acc0_p3 = load merged_matmul_partials[3, a0, a1]
    acc0_s3 = add(acc0_s2, acc0_p3)
    matmul[a0, a1] = acc0_s3"""

# -- 004_cooperative_reduce --------------------------------------------------------------------
BEFORE_004 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a0:4=THREAD)):
    for a1 in 0..256:  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    for a2 in 0..256:  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    for a3 in 0..256:  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# Each row of 256 is reduced by 32 lanes (a new THREAD axis a4): every phase strides by 32,
# and each reduction ends in a Combine over the lanes before the next phase reads it.
EXPECTED_004 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a0:4=THREAD, a4:32=THREAD)):
    StridedLoop(a1 = a4; < 256; += 32):  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4; < 256; += 32):  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4; < 256; += 32):  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# -- 005_blockify_launch -----------------------------------------------------------------------
BEFORE_005 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a0:4=THREAD, a4:32=THREAD)):
    StridedLoop(a1 = a4; < 256; += 32):  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4; < 256; += 32):  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4; < 256; += 32):  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# The rows become a BLOCK axis (4 blocks of 32 lanes) and every phase reads and writes x as
# float4: the lane's start is a4 * 4, the stride 128, with a vector loop of 4 inside.
EXPECTED_005 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a4:32=THREAD, a0:4=BLOCK)):
    StridedLoop(a1 = a4 * 4; < 256; += 128):  # reduce
        for a1v in 0..4:  # vector
            in0 = load x[a0, a1 + a1v]  # float4
            acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4 * 4; < 256; += 128):  # reduce
        for a2v in 0..4:  # vector
            in1 = load x[a0, a2 + a2v]  # float4
            v0 = subtract(in1, acc0)
            v1 = exp(v0)
            acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4 * 4; < 256; += 128):  # free
        for a3v in 0..4:  # vector
            in2 = load x[a0, a3 + a3v]  # float4
            v2 = subtract(in2, acc0)
            v3 = exp(v2)
            v4 = divide(v3, acc1)
            softmax[a0, a3 + a3v] = v4  # float4"""

# -- 006_chunk_reduce --------------------------------------------------------------------------
BEFORE_006 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a4:256=THREAD, a0:2=BLOCK)):
    StridedLoop(a1 = a4; < 5003; += 256):  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4; < 5003; += 256):  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4; < 5003; += 256):  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4"""

# A row of 5003 floats does not fit in a 16 KiB budget of shared memory: each phase splits into
# a head of 3840 elements (15 strides of 256 lanes, 15 KiB: what 007 may stage) and a tail
# read from global memory.
EXPECTED_006 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a4:256=THREAD, a0:2=BLOCK)):
    StridedLoop(a1 = a4; < 3840; += 256):  # reduce
        in0 = load x[a0, a1]
        acc0 <- max(acc0, in0)
    StridedLoop(a1c = a4 + 3840; < 5003; += 256):  # reduce
        in0 = load x[a0, a1c]
        acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4; < 3840; += 256):  # reduce
        in1 = load x[a0, a2]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    StridedLoop(a2c = a4 + 3840; < 5003; += 256):  # reduce
        in1 = load x[a0, a2c]
        v0 = subtract(in1, acc0)
        v1 = exp(v0)
        acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4; < 3840; += 256):  # free
        in2 = load x[a0, a3]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3] = v4
    StridedLoop(a3c = a4 + 3840; < 5003; += 256):  # free
        in2 = load x[a0, a3c]
        v2 = subtract(in2, acc0)
        v3 = exp(v2)
        v4 = divide(v3, acc1)
        softmax[a0, a3c] = v4"""

# -- 008_register_tile -------------------------------------------------------------------------
BEFORE_008 = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):4=BLOCK, a1b(N):2=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 8, a2o * 16), slab=(a0t:8@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1t:16@1))
        for a2i in 0..16:  # reduce (K)
            in0 = load a_smem[a0t, a2i]
            in1 = load b_smem[a2i, a1t]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    matmul[a0b * 8 + a0t, a1b * 16 + a1t] = acc0"""

# Each thread owns a 4 x 2 register block (acc0[4, 2]): the block grows to 32 x 32 outputs (one
# block), the slabs to 32 rows / columns, a is loaded once per row of the block and reused for
# its 2 columns; the stores read the registers back (quads: a thread's columns adjacent).
EXPECTED_008 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# -- 009_permute_register_tile -----------------------------------------------------------------
BEFORE_009 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0t * 4 + a0r, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0t * 4 + a0r, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# With the contiguous layout the 8 threads of a column read rows a0t * 4 + a0r of a_smem at the
# same a0r: a bank conflict. Rotating the strip by the thread index ((a0r + a0t) % 4) spreads
# them; the store is permuted the same way so each output lands where it belongs.
EXPECTED_009 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0t * 4 + ((a0r + a0t) % 4), a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0t * 4 + ((a0r + a0t) % 4), a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# -- 010_double_buffer -------------------------------------------------------------------------
BEFORE_010 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# The K-outer stages become BufferedStage (two buffers, ping-pong); the loads are unchanged.
EXPECTED_010 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = BufferedStage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = BufferedStage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# -- 011_tma_copy ------------------------------------------------------------------------------
BEFORE_011 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = BufferedStage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = BufferedStage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# The buffered stages become TMA copies (a 32x16 and a 16x32 tensor-map box) and an AsyncWait
# on both follows them, before the K-inner loop reads the slabs.
EXPECTED_011 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = TmaBufferedStage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1), tmap=32x16)
        b_smem = TmaBufferedStage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1), tmap=16x32)
        AsyncWait(a_smem, b_smem)
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# -- 012_swizzle_smem --------------------------------------------------------------------------
BEFORE_012 = """\
=== merged_matmul -> merged_matmul_partials ===
split-K 16 into merged_matmul_partials, reduced by merged_matmul_reduce  # deterministic
Tile(axes=(a0(M):16=THREAD, a1t(N):8=THREAD, a2s(K):16=BLOCK, a1b(N):2=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = TmaBufferedStage(a, origin=(0, a2s * 64 + a2o * 16), slab=(a0:16@0, a2i:16@1), tmap=16x16)
        b_smem = TmaBufferedStage(b, origin=(a2s * 64 + a2o * 16, a1b * 8), slab=(a2i:16@0, a1t:8@1), tmap=16x8)
        AsyncWait(a_smem, b_smem)
        for a2i in 0..16:  # reduce (K)
            in0 = load a_smem[a0, a2i]
            in1 = load b_smem[a2i, a1t]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    merged_matmul_partials[a2s, a0, a1b * 8 + a1t] = acc0

=== merged_matmul_reduce -> matmul ===
reduces merged_matmul  # its split-K partial sums, in split order
Tile(axes=(a0t(M):8=THREAD, a1(N):16=THREAD, a0b(M):2=BLOCK)):
    acc0_p0 = load merged_matmul_partials[0, a0b * 8 + a0t, a1]
    acc0_p1 = load merged_matmul_partials[1, a0b * 8 + a0t, a1]
    acc0_s1 = add(acc0_p0, acc0_p1)
    acc0_p2 = load merged_matmul_partials[2, a0b * 8 + a0t, a1]
    acc0_s2 = add(acc0_s1, acc0_p2)
    acc0_p3 = load merged_matmul_partials[3, a0b * 8 + a0t, a1]
    acc0_s3 = add(acc0_s2, acc0_p3)
    acc0_p4 = load merged_matmul_partials[4, a0b * 8 + a0t, a1]
    acc0_s4 = add(acc0_s3, acc0_p4)
    acc0_p5 = load merged_matmul_partials[5, a0b * 8 + a0t, a1]
    acc0_s5 = add(acc0_s4, acc0_p5)
    acc0_p6 = load merged_matmul_partials[6, a0b * 8 + a0t, a1]
    acc0_s6 = add(acc0_s5, acc0_p6)
    acc0_p7 = load merged_matmul_partials[7, a0b * 8 + a0t, a1]
    acc0_s7 = add(acc0_s6, acc0_p7)
    acc0_p8 = load merged_matmul_partials[8, a0b * 8 + a0t, a1]
    acc0_s8 = add(acc0_s7, acc0_p8)
    acc0_p9 = load merged_matmul_partials[9, a0b * 8 + a0t, a1]
    acc0_s9 = add(acc0_s8, acc0_p9)
    acc0_p10 = load merged_matmul_partials[10, a0b * 8 + a0t, a1]
    acc0_s10 = add(acc0_s9, acc0_p10)
    acc0_p11 = load merged_matmul_partials[11, a0b * 8 + a0t, a1]
    acc0_s11 = add(acc0_s10, acc0_p11)
    acc0_p12 = load merged_matmul_partials[12, a0b * 8 + a0t, a1]
    acc0_s12 = add(acc0_s11, acc0_p12)
    acc0_p13 = load merged_matmul_partials[13, a0b * 8 + a0t, a1]
    acc0_s13 = add(acc0_s12, acc0_p13)
    acc0_p14 = load merged_matmul_partials[14, a0b * 8 + a0t, a1]
    acc0_s14 = add(acc0_s13, acc0_p14)
    acc0_p15 = load merged_matmul_partials[15, a0b * 8 + a0t, a1]
    acc0_s15 = add(acc0_s14, acc0_p15)
    matmul[a0b * 8 + a0t, a1] = acc0_s15"""

# Only a_smem's reads conflict (2 wavefronts): its box gets a 64-byte swizzle; b_smem would gain
# nothing and keeps its plain box. The split-K reducer has no TMA stage and is left alone.
EXPECTED_012 = """\
=== merged_matmul -> merged_matmul_partials ===
split-K 16 into merged_matmul_partials, reduced by merged_matmul_reduce  # deterministic
Tile(axes=(a0(M):16=THREAD, a1t(N):8=THREAD, a2s(K):16=BLOCK, a1b(N):2=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = TmaBufferedStage(a, origin=(0, a2s * 64 + a2o * 16), slab=(a0:16@0, a2i:16@1), tmap=16x16,swizzle=64B)
        b_smem = TmaBufferedStage(b, origin=(a2s * 64 + a2o * 16, a1b * 8), slab=(a2i:16@0, a1t:8@1), tmap=16x8)
        AsyncWait(a_smem, b_smem)
        for a2i in 0..16:  # reduce (K)
            in0 = load a_smem[a0, a2i]
            in1 = load b_smem[a2i, a1t]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    merged_matmul_partials[a2s, a0, a1b * 8 + a1t] = acc0

=== merged_matmul_reduce -> matmul ===
reduces merged_matmul  # its split-K partial sums, in split order
Tile(axes=(a0t(M):8=THREAD, a1(N):16=THREAD, a0b(M):2=BLOCK)):
    acc0_p0 = load merged_matmul_partials[0, a0b * 8 + a0t, a1]
    acc0_p1 = load merged_matmul_partials[1, a0b * 8 + a0t, a1]
    acc0_s1 = add(acc0_p0, acc0_p1)
    acc0_p2 = load merged_matmul_partials[2, a0b * 8 + a0t, a1]
    acc0_s2 = add(acc0_s1, acc0_p2)
    acc0_p3 = load merged_matmul_partials[3, a0b * 8 + a0t, a1]
    acc0_s3 = add(acc0_s2, acc0_p3)
    acc0_p4 = load merged_matmul_partials[4, a0b * 8 + a0t, a1]
    acc0_s4 = add(acc0_s3, acc0_p4)
    acc0_p5 = load merged_matmul_partials[5, a0b * 8 + a0t, a1]
    acc0_s5 = add(acc0_s4, acc0_p5)
    acc0_p6 = load merged_matmul_partials[6, a0b * 8 + a0t, a1]
    acc0_s6 = add(acc0_s5, acc0_p6)
    acc0_p7 = load merged_matmul_partials[7, a0b * 8 + a0t, a1]
    acc0_s7 = add(acc0_s6, acc0_p7)
    acc0_p8 = load merged_matmul_partials[8, a0b * 8 + a0t, a1]
    acc0_s8 = add(acc0_s7, acc0_p8)
    acc0_p9 = load merged_matmul_partials[9, a0b * 8 + a0t, a1]
    acc0_s9 = add(acc0_s8, acc0_p9)
    acc0_p10 = load merged_matmul_partials[10, a0b * 8 + a0t, a1]
    acc0_s10 = add(acc0_s9, acc0_p10)
    acc0_p11 = load merged_matmul_partials[11, a0b * 8 + a0t, a1]
    acc0_s11 = add(acc0_s10, acc0_p11)
    acc0_p12 = load merged_matmul_partials[12, a0b * 8 + a0t, a1]
    acc0_s12 = add(acc0_s11, acc0_p12)
    acc0_p13 = load merged_matmul_partials[13, a0b * 8 + a0t, a1]
    acc0_s13 = add(acc0_s12, acc0_p13)
    acc0_p14 = load merged_matmul_partials[14, a0b * 8 + a0t, a1]
    acc0_s14 = add(acc0_s13, acc0_p14)
    acc0_p15 = load merged_matmul_partials[15, a0b * 8 + a0t, a1]
    acc0_s15 = add(acc0_s14, acc0_p15)
    matmul[a0b * 8 + a0t, a1] = acc0_s15"""

# -- 013_async_copy ----------------------------------------------------------------------------
BEFORE_013 = """\
=== merged_rms_norm -> rms_norm ===
Tile(axes=(a3:32=THREAD, a0:4=BLOCK)):
    x_smem = Stage(x, origin=(a0, 0), slab=(a1:64@1))
    StridedLoop(a1 = a3 * 4; < 64; += 128):  # reduce
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            v0 = multiply(in0, in0)
            acc0 <- add(acc0, v0)
    Combine(acc0, add, over=(a3,))
    v1 = divide(acc0, 64)
    v2 = add(v1, 1.1920928955078125e-07)
    v3 = rsqrt(v2)
    StridedLoop(a2 = a3 * 4; < 64; += 128):  # free
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            in2 = load p_weight[a2 + a2v]  # float4
            v4 = multiply(in1, v3)
            v5 = multiply(v4, in2)
            rms_norm[a0, a2 + a2v] = v5  # float4"""

# The row's Stage becomes a cp.async AsyncStage, waited for (AsyncWait) before its first read.
EXPECTED_013 = """\
=== merged_rms_norm -> rms_norm ===
Tile(axes=(a3:32=THREAD, a0:4=BLOCK)):
    x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:64@1))
    AsyncWait(x_smem)
    StridedLoop(a1 = a3 * 4; < 64; += 128):  # reduce
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            v0 = multiply(in0, in0)
            acc0 <- add(acc0, v0)
    Combine(acc0, add, over=(a3,))
    v1 = divide(acc0, 64)
    v2 = add(v1, 1.1920928955078125e-07)
    v3 = rsqrt(v2)
    StridedLoop(a2 = a3 * 4; < 64; += 128):  # free
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            in2 = load p_weight[a2 + a2v]  # float4
            v4 = multiply(in1, v3)
            v5 = multiply(v4, in2)
            rms_norm[a0, a2 + a2v] = v5  # float4"""

# -- 014_pad_smem ------------------------------------------------------------------------------
BEFORE_014 = """\
=== merged_linear -> linear ===
register acc0[2, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        x0_smem = AsyncBufferedStage(x0, origin=(a0b * 16, a2o * 16), slab=(a0:16@0, a2i:16@1))
        x1_smem = AsyncBufferedStage(x1, origin=(a1b * 32, a2o * 16), slab=(a1:32@0, a2i:16@1))
        AsyncWait(x0_smem, x1_smem)
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..2:  # register (M) unroll
                in0 = load x0_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load x1_smem[a1t * 2 + ((a1r + a1t) % 2), a2i]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..2:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            linear[a0b * 16 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + ((a1r + a1t) % 2)] = acc0_v"""

# The weight slab x1_smem is read down its columns (16 floats a row: every row in the same
# banks); 4 floats of padding per row break the conflict. x0_smem is read along rows: no pad.
EXPECTED_014 = """\
=== merged_linear -> linear ===
register acc0[2, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        x0_smem = AsyncBufferedStage(x0, origin=(a0b * 16, a2o * 16), slab=(a0:16@0, a2i:16@1))
        x1_smem = AsyncBufferedStage(x1, origin=(a1b * 32, a2o * 16), slab=(a1:32@0, a2i:16@1), pad=4)
        AsyncWait(x0_smem, x1_smem)
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..2:  # register (M) unroll
                in0 = load x0_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load x1_smem[a1t * 2 + ((a1r + a1t) % 2), a2i]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..2:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            linear[a0b * 16 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + ((a1r + a1t) % 2)] = acc0_v"""

# -- 015_pipeline_k_outer ----------------------------------------------------------------------
BEFORE_015 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = AsyncBufferedStage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = AsyncBufferedStage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1))
        AsyncWait(a_smem, b_smem)
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# The copies of the K-outer loop are rotated: the loop waits for the slabs issued one iteration
# earlier, then issues the next ones (prefetch=1), so the copy overlaps the K-inner loop.
EXPECTED_015 = """\
=== merged_matmul -> matmul ===
register acc0[4, 2]
Tile(axes=(a0t(M):8=THREAD, a1t(N):16=THREAD, a0b(M):1=BLOCK, a1b(N):1=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        AsyncWait(a_smem, b_smem)
        a_smem = AsyncBufferedStage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1), prefetch=1)
        b_smem = AsyncBufferedStage(b, origin=(a2o * 16, a1b * 32), slab=(a2i:16@0, a1:32@1), prefetch=1)
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..4:  # register (M) unroll
                in0 = load a_smem[a0r * 8 + a0t, a2i]
                for a1r in 0..2:  # register (N) unroll
                    in1 = load b_smem[a2i, a1t * 2 + a1r]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..4:  # register (M) unroll
        for a1r in 0..2:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 8 + a0t, a1b * 32 + a1t * 2 + a1r] = acc0_v"""

# -- 016_mark_unroll ---------------------------------------------------------------------------
BEFORE_016 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a4:32=THREAD, a0:4=BLOCK)):
    x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:256@1))
    AsyncWait(x_smem)
    StridedLoop(a1 = a4 * 4; < 256; += 128):  # reduce
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4 * 4; < 256; += 128):  # reduce
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            v0 = subtract(in1, acc0)
            v1 = exp(v0)
            acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4 * 4; < 256; += 128):  # free
        for a3v in 0..4:  # vector
            in2 = load x_smem[a3 + a3v]
            v2 = subtract(in2, acc0)
            v3 = exp(v2)
            v4 = divide(v3, acc1)
            softmax[a0, a3 + a3v] = v4  # float4"""

# Each lane's strided loops run 256 / 128 = 2 times (<= max_trip 8): marked `unroll`.
EXPECTED_016 = """\
=== merged_softmax -> softmax ===
Tile(axes=(a4:32=THREAD, a0:4=BLOCK)):
    x_smem = AsyncStage(x, origin=(a0, 0), slab=(a1:256@1))
    AsyncWait(x_smem)
    StridedLoop(a1 = a4 * 4; < 256; += 128):  # reduce unroll
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            acc0 <- max(acc0, in0)
    Combine(acc0, max, over=(a4,))
    StridedLoop(a2 = a4 * 4; < 256; += 128):  # reduce unroll
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            v0 = subtract(in1, acc0)
            v1 = exp(v0)
            acc1 <- add(acc1, v1)
    Combine(acc1, add, over=(a4,))
    StridedLoop(a3 = a4 * 4; < 256; += 128):  # free unroll
        for a3v in 0..4:  # vector
            in2 = load x_smem[a3 + a3v]
            v2 = subtract(in2, acc0)
            v3 = exp(v2)
            v4 = divide(v3, acc1)
            softmax[a0, a3 + a3v] = v4  # float4"""

CASES = [
    ('001_tileify', 'rms_norm', BEFORE_001, EXPECTED_001,
     {},
     None,
     None),
    ('002_chunk_matmul_k', 'matmul', BEFORE_002, EXPECTED_002,
     {'k_chunk': 16},
     None,
     None),
    ('003_split_matmul_k', 'matmul_long_k', BEFORE_003, EXPECTED_003,
     {'splits': 4, 'reduce': 'reducer'},
     {'splits': 1, 'reduce': 'reducer'},
     ('merged_matmul: splits=1: no split count in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16,'
      ' 24, 32, 48, 64) divides 64 K chunks of 16 into runs of at least 4; no stream-K: 1 tile x 64 K'
      ' chunks are under 4 an SM')),
    ('004_cooperative_reduce', 'softmax', BEFORE_004, EXPECTED_004,
     {'lanes': 32},
     None,
     None),
    ('005_blockify_launch', 'softmax', BEFORE_005, EXPECTED_005,
     {'block_threads': 256, 'vector_width': 4, 'thread_shape': '16x16'},
     None,
     None),
    ('006_chunk_reduce', 'softmax_long', BEFORE_006, EXPECTED_006,
     {'smem_budget': 16384},
     None,
     None),
    ('008_register_tile', 'matmul', BEFORE_008, EXPECTED_008,
     {'tm': 4, 'tn': 2, 'layout': 'quads', 'mma': 'off', 'wgmma_n': 0},
     {'tm': 1, 'tn': 1, 'layout': 'quads', 'mma': 'off', 'wgmma_n': 0},
     'merged_matmul: tm=1, tn=1: one output per thread'),
    ('009_permute_register_tile', 'matmul_contiguous', BEFORE_009, EXPECTED_009,
     {'permute': True},
     {'permute': False},
     'merged_matmul: permutation disabled by the knob'),
    ('010_double_buffer', 'matmul', BEFORE_010, EXPECTED_010,
     {'enable': True, 'stages': 2},
     {'enable': False, 'stages': 2},
     'merged_matmul: double buffering disabled by the knob'),
    ('011_tma_copy', 'matmul_tma', BEFORE_011, EXPECTED_011,
     {'enable': True, 'repack': 'auto'},
     {'enable': False, 'repack': 'auto'},
     ('merged_matmul: a register block of 8 outputs per thread (< 32) is too small to '
      "hide the TMA producer's ~35 issue slots per K step: cp.async (enable=True forces"
      ' TMA)')),
    ('012_swizzle_smem', 'matmul_long_k_tma', BEFORE_012, EXPECTED_012,
     {'enable': True},
     {'enable': False},
     ('merged_matmul: swizzling disabled by the knob; merged_matmul_reduce: swizzling '
      'disabled by the knob')),
    ('013_async_copy', 'rms_norm', BEFORE_013, EXPECTED_013,
     {'enable': True},
     {'enable': False},
     'merged_rms_norm: cp.async copies disabled by the knob'),
    ('014_pad_smem', 'linear', BEFORE_014, EXPECTED_014,
     {'pad': 4},
     {'pad': 0},
     'merged_linear: padding disabled by the knob (pad=0)'),
    ('015_pipeline_k_outer', 'matmul', BEFORE_015, EXPECTED_015,
     {'enable': True, 'warp_specialize': False, 'wgmma_in_flight': 1},
     {'enable': False},
     'merged_matmul: pipelining disabled by the knob'),
    ('016_mark_unroll', 'softmax', BEFORE_016, EXPECTED_016,
     {'max_trip': 8, 'unroll_k': True},
     {'max_trip': 0, 'unroll_k': False},
     'merged_softmax: no loop of at most 0 iterations per thread'),
]
GOLDEN = {case[0] for case in CASES}


@pytest.mark.parametrize("name, program, given, expected, knobs, off, off_reason", CASES, ids=[c[0] for c in CASES])
def test_pass_alone_rewrites_the_given_tile_ir(name, program, given, expected, knobs, off, off_reason):
    ir = before(program, name)
    assert str(ir) == given
    step = run_alone(name, ir, {f"{name}.{k}": v for k, v in knobs.items()})
    assert str(step.after) == expected and step.skipped_reason == ""
    # the knob values are the decision recorded for each kernel the pass rewrote, and stamped on it
    applied = {d.kernel for d in step.decisions if not d.skipped}
    assert applied and all(decisions(step)[n] == tuple(knobs.items()) for n in applied)
    stamp = tuple((f"{name}.{n}", v) for n, v in knobs.items())
    assert all(k.knobs[len(k.knobs) - len(stamp):] == stamp for k in step.after.kernels if k.name in applied)


@pytest.mark.parametrize("name, program, given, expected, knobs, off, off_reason",
                         [c for c in CASES if c[5] is not None], ids=[c[0] for c in CASES if c[5] is not None])
def test_pass_off_by_its_knob(name, program, given, expected, knobs, off, off_reason):
    ir = before(program, name)
    step = run_alone(name, ir, {f"{name}.{k}": v for k, v in off.items()})
    assert step.after == ir and step.skipped_reason == off_reason


@pytest.mark.parametrize("name, program", [c[:2] for c in CASES], ids=[c[0] for c in CASES])
def test_the_simulator_still_matches_torch_after_the_pass(name, program):
    (check,) = [p for p in check_passes(program) if p.name == name]
    assert not check.skipped and check.result.ok
