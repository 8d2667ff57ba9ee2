"""Pass 007 stage_inputs alone: the Tile IR it is given, the Tile IR it must return, as text.

The pattern for testing one scheduling pass (copy this file for another): build the kernel
as the earlier passes leave it (here a 32x64 @ 64x32 matmul after 001..006: 16x16 threads,
2x2 blocks, K chunked by 16), pin its text (so the example stays the one meant), run the
pass record alone with explicit knobs, compare the printed Tile IR with the text expected,
check the decisions it stamps, the knob that turns it off, and (through the pipeline, on a
program the pass changes) that the simulator still gets PyTorch's numbers. Nothing before
the pass runs, so a change elsewhere cannot move this test."""
import torch

import deplokit
from deplokit.ir.index import var
from deplokit.ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from deplokit.ir.tile_ir import BLOCK, THREAD, Stage, Tile, TileAxis, TileKernel, walk
from deplokit.ir.types import TensorType
from deplokit.passes.record import Skip
from deplokit.passes.schedule.t007_stage_inputs import PASS
from deplokit.target import get_target

GOLDEN = {PASS.name}     # the passes this module gives a golden test (test_pass_registry.py)

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
    # how the threads copy each slab is stamped for the lowering (not printed): rows of 16
    # floats at 16-byte aligned columns of both tensors, so float4 units
    assert {(s.name, s.unit) for s, _ in walk(after.body) if isinstance(s, Stage)} == {("a_smem", 4), ("b_smem", 4)}


def test_007_off_by_its_knob_and_on_a_staged_kernel():
    kernel = matmul_kernel()
    off, _ = PASS.apply_to(kernel, get_target("sm_90"), {"stage": False}, TYPES)
    assert off == Skip("staging disabled by the knob")
    after, _ = PASS.apply_to(kernel, get_target("sm_90"), {"stage": True}, TYPES)
    again, _ = PASS.apply_to(after, get_target("sm_90"), {"stage": True}, TYPES)
    assert again == Skip("already staged")


def test_007_keeps_the_meaning_on_the_simulator():
    # softmax(x) * w reads each row of x three times: 007 stages it (check_passes runs the
    # Tile IR after every pass on the simulator against PyTorch)
    torch.manual_seed(0)
    c = deplokit.compile(lambda x, w: torch.softmax(x, -1) * w, torch.randn(4, 256), torch.randn(256))
    (check,) = [p for p in c.check_passes() if p.name == PASS.name]
    assert not check.skipped and check.result.ok
    (step,) = [s for s in c.trace if s.name == PASS.name]
    assert "    x_smem = Stage(x, origin=(a0, 0), slab=(a1:256@1))\n" in str(step.after)


def test_007_stages_no_row_gathered_by_a_loop_variable():
    # x[:, ids] @ w.T: the gathered column moves with the K loop, so no slab of x has one
    # origin for the block (the lowering loads a gathered origin once, at the kernel's start);
    # the kernel reads x unstaged and still gets PyTorch's numbers (fuzz seed 404 case 234)
    torch.manual_seed(0)
    ids = torch.randint(0, 1, (127,))
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x.index_select(-1, ids), w),
                         torch.randn(3, 1), torch.randn(3, 127), target="sm_80")
    staged = [s for k in c.tile_ir.kernels for s, _ in walk(k.body) if isinstance(s, Stage)]
    assert staged and not any(s.tensor == "x" for s in staged)
    assert c.check(backend="sim").ok
