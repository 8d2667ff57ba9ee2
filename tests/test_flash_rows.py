"""Two query rows a thread (FlashPlan.rows, knob fuse_attention.rows_per_thread,
docs/flash_hd128.md): where one row a thread at head_dim 128 leaves an SM under WARPS_GOAL
warps (the suite's causal GQA 28/4: 2 lanes a row, 191 registers), the plan deals each thread
two rows at twice the lanes, stages the block's query rows in shared memory and runs the
score loop head_dim-outer, so that every K and V quad a thread reads serves both rows. The
simulator matches eager, the knob turns it off, and on sm_90 the key loop's FFMA share
passes 0.75 with fewer registers."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir.tile_ir import Stage, walk
from deplokit.runtime.sass import sass_available

FLASH = {"fuse_attention.by_cost": False}
ONE_ROW = {**FLASH, "fuse_attention.rows_per_thread": 1}
# heads, kv heads, queries, keys, head_dim, causal: a GQA group of 7 (qwen's) at head_dim 128; the
# keys outnumber the queries so that the grid fill does not deal the group to blocks of 1 head
CASES = {
    "causal_gqa7_t61": (14, 2, 16, 61, 128, True),
    "noncausal_mqa7_t64": (7, 1, 13, 64, 128, False),
}


def _compile(heads, kv_heads, seq, keys, d, causal, config=FLASH, target="sm_90"):
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, heads, seq, d, generator=g), torch.randn(1, kv_heads, keys, d, generator=g),
              torch.randn(1, kv_heads, keys, d, generator=g))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # noqa: E731
    return deplokit.compile(fn, *inputs, config=config, target=target)


def _flash(c):
    return next(k for k in c.tile_ir.kernels if k.flash is not None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_two_rows_a_thread_match_eager_on_the_simulator(name):
    c = _compile(*CASES[name])
    kernel = _flash(c)
    plan = kernel.flash
    assert plan.rows == 2 and plan.lanes == 4 and plan.scatter and not plan.query_registers
    # the block's query rows staged once, before the key loop; row r's own scores and output row
    stages = [s for s in kernel.tile().body if isinstance(s, Stage)]
    assert [s.tensor for s in stages] == ["q"] and stages[0].pad == 8
    assert {r.acc for r in kernel.register_tiles} >= {"s_acc_r0", "s_acc_r1", "row_out_r0", "row_out_r1"}
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


def test_the_plan_says_why_and_the_knob_keeps_one_row():
    c = _compile(*CASES["causal_gqa7_t61"])
    text = " ".join(n for s in c.trace for n in s.notes)
    assert "2 query rows a thread, 4 lanes a row: about" in text and "(1 row, 2 lanes: 227)" in text
    one = _flash(_compile(*CASES["causal_gqa7_t61"], config=ONE_ROW)).flash
    assert one.rows == 1 and one.lanes == 2 and one.query_registers
    assert not any(isinstance(s, Stage) and s.tensor == "q" for s, _ in walk(_flash(_compile(
        *CASES["causal_gqa7_t61"], config=ONE_ROW)).tile().body))


def test_four_lanes_at_sixteen_warps_keep_one_row():
    """Head_dim 128 at 4 lanes (128 registers, 16 warps an SM): two rows would need 8 lanes,
    whose shuffles cost what the shared K/V quads save; the plan keeps one row."""
    plan = _flash(_compile(4, 2, 21, 21, 128, True)).flash
    assert plan.lanes == 4 and plan.rows == 1


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_two_rows_raise_the_suite_key_loops_ffma_share_past_three_quarters():
    """The suite's sdpa.qwen.s512 (causal GQA 28/4, head_dim 128), sm_90, static counts of the
    hottest loop: one row, 2 lanes: 191 registers, share 0.720; two rows, 4 lanes: 158
    registers, share 0.761 (2090 FFMA, 272 LDS.128 where one row issued 512), no spills
    (docs/flash_hd128.md)."""
    mixes = {}
    for rows, config in ((1, ONE_ROW), (2, FLASH)):
        c = _compile(28, 4, 512, 512, 128, True, config=config)
        assert _flash(c).flash.rows == rows
        name = next(k.name for k in c.kernel_ir.kernels if k.name.startswith("flash"))
        kernel = c.sass().kernel(name)
        assert kernel.spills == 0
        mixes[rows] = (kernel.registers, kernel.hottest.mix)
    (regs1, one), (regs2, two) = mixes[1], mixes[2]
    assert two.ffma_share >= 0.75 > one.ffma_share
    assert two.lds128 * 3 < one.lds128 * 2 and regs2 < regs1
