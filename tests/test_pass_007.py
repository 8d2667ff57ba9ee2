"""Pass 007 (stage inputs) on one kernel: the Tile IR it is given and the Tile IR it must
return, as text. A template for the other scheduling passes: pick a small program whose
kernel shows the pass's decision, pin the IR before it (so the example stays the one meant)
and the IR expected after it, and check the knob that turns it off and the simulator.

The kernel: softmax over rows of 256, times a weight row. Each thread reads its part of the
row `x` three times (max, sum, output), so 007 stages the block's row of `x` in shared memory
once and the three loops read it from there (no longer as float4 global loads: the stage's
copy moves the row); `w` is read once per element and stays a float4 global load.
"""
import torch

import deplokit

BEFORE = """\
=== merged_mul -> mul ===
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
            in3 = load w[a3 + a3v]  # float4
            v2 = subtract(in2, acc0)
            v3 = exp(v2)
            v4 = divide(v3, acc1)
            v5 = multiply(v4, in3)
            mul[a0, a3 + a3v] = v5  # float4"""

EXPECTED = """\
=== merged_mul -> mul ===
Tile(axes=(a4:32=THREAD, a0:4=BLOCK)):
    x_smem = Stage(x, origin=(a0, 0), slab=(a1:256@1))
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
            in3 = load w[a3 + a3v]  # float4
            v2 = subtract(in2, acc0)
            v3 = exp(v2)
            v4 = divide(v3, acc1)
            v5 = multiply(v4, in3)
            mul[a0, a3 + a3v] = v5  # float4"""

PASS = "007_stage_inputs"


def _compile(config=None):
    torch.manual_seed(0)
    return deplokit.compile(lambda x, w: torch.softmax(x, -1) * w, torch.randn(4, 256), torch.randn(256),
                            config=config)


def _step(c):
    (step,) = [s for s in c.trace if s.name == PASS]
    return step


def test_007_stages_the_row_read_three_times_and_leaves_the_weight_global():
    step = _step(_compile())
    assert str(step.before).strip() == BEFORE
    assert str(step.after).strip() == EXPECTED


def test_007_turned_off_leaves_the_tile_ir_as_it_was():
    step = _step(_compile({f"{PASS}.stage": False}))
    assert str(step.before).strip() == BEFORE
    assert str(step.after).strip() == BEFORE


def test_007_keeps_the_meaning_on_the_simulator():
    c = _compile()
    (check,) = [p for p in c.check_passes() if p.name == PASS]
    assert not check.skipped and check.result.ok
