"""Pass 007 stage_inputs alone: a hand-written Tile kernel in, the Tile IR expected out.

The pattern for testing one scheduling pass: build the kernel as the earlier passes leave
it (here a 32x64 @ 64x32 matmul after 001..006: 16x16 threads, 2x2 blocks, K chunked by
16), run the pass record with explicit knobs, compare the printed Tile IR with the text
expected. Nothing before the pass runs, so a change elsewhere cannot move this test."""
from deplokit.ir.index import var
from deplokit.ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from deplokit.ir.tile_ir import BLOCK, THREAD, Tile, TileAxis, TileKernel
from deplokit.ir.types import TensorType
from deplokit.passes.record import Skip
from deplokit.passes.schedule.t007_stage_inputs import PASS
from deplokit.target import get_target

TYPES = {"a": TensorType((32, 64), "float32"), "b": TensorType((64, 32), "float32"),
         "matmul": TensorType((32, 32), "float32")}

BEFORE = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):2=BLOCK, a1b(N):2=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        for a2i in 0..16:  # reduce (K)
            in0 = load a[a0b * 16 + a0t, a2o * 16 + a2i]
            in1 = load b[a2o * 16 + a2i, a1b * 16 + a1t]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    matmul[a0b * 16 + a0t, a1b * 16 + a1t] = acc0"""

# Each block reads a 16 x 16 slab of a and of b per K chunk, every element 16 times (once
# per thread of a row or column): both are staged at the head of the K-outer loop, and the
# loads read the slabs with block-relative indices.
EXPECTED = """\
=== merged_matmul -> matmul ===
Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):2=BLOCK, a1b(N):2=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 16, a2o * 16), slab=(a0t:16@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1t:16@1))
        for a2i in 0..16:  # reduce (K)
            in0 = load a_smem[a0t, a2i]
            in1 = load b_smem[a2i, a1t]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    matmul[a0b * 16 + a0t, a1b * 16 + a1t] = acc0"""


def matmul_kernel() -> TileKernel:
    m, n, k = var("a0b") * 16 + var("a0t"), var("a1b") * 16 + var("a1t"), var("a2o") * 16 + var("a2i")
    inner = Loop("a2i", 16, "reduce", (Load("in0", "a", (m, k)), Load("in1", "b", (k, n)),
                                       Compute("v0", "multiply", ("in0", "in1")),
                                       Accumulate("acc0", "sum", "v0")), "K")
    axes = (TileAxis("a0t", 16, THREAD, "M"), TileAxis("a1t", 16, THREAD, "N"),
            TileAxis("a0b", 2, BLOCK, "M"), TileAxis("a1b", 2, BLOCK, "N"))
    tile = Tile(axes, (Loop("a2o", 4, "reduce", (inner,), "K"), Store("matmul", (m, n), "acc0")))
    return TileKernel("merged_matmul", ("matmul",), (tile,))


def test_007_stages_the_matmul_operands():
    kernel = matmul_kernel()
    assert str(kernel) == BEFORE
    after, note = PASS.apply_to(kernel, get_target("sm_90"), {"stage": True}, TYPES)
    assert str(after) == EXPECTED and note == ""
    assert after.knobs == (("007_stage_inputs.stage", True),)     # the choice is recorded on the kernel


def test_007_off_by_its_knob_and_on_a_staged_kernel():
    kernel = matmul_kernel()
    off, _ = PASS.apply_to(kernel, get_target("sm_90"), {"stage": False}, TYPES)
    assert off == Skip("staging disabled by the knob")
    after, _ = PASS.apply_to(kernel, get_target("sm_90"), {"stage": True}, TYPES)
    again, _ = PASS.apply_to(after, get_target("sm_90"), {"stage": True}, TYPES)
    assert again == Skip("already staged")
