"""Grid fill in attention fusion's cost check (passes/fuse/grid_fill.py): a flash kernel of
few blocks leaves SMs idle; the guard estimates both sides with their blocks dealt to the
target's SMs, the trace says so, and the knob still forces the fusion."""
import torch
import torch.nn.functional as F

import deplokit
from deplokit.passes.fuse.grid_fill import LAUNCH_US, estimate
from deplokit.passes.fuse.guard import Traffic
from deplokit.target import get_target


def _r(*shape, seed=[200]):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0]))


def _sdpa(causal):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _notes(c):
    return next(s for s in c.trace if s.name == "fuse_attention").notes


def test_fewer_blocks_than_sms_are_estimated_slower():
    h100 = get_target("sm_90")
    work = Traffic(64 << 20, 10 ** 9)
    full, half, one = (estimate(work, b, h100) for b in (h100.sm_count * 4, h100.sm_count // 2, 1))
    assert full.fill == 1.0 and half.fill == 0.5 and one.fill == 1 / h100.sm_count
    assert full.us < half.us < one.us
    assert abs((half.us - LAUNCH_US) - 2 * (full.us - LAUNCH_US)) < 1e-6
    # the same kernel on a part with fewer SMs fills it sooner
    assert estimate(work, 108, get_target("sm_80")).fill == 1.0 > estimate(work, 108, h100).fill


def test_the_trace_gives_both_estimates():
    inputs = (_r(1, 8, 64, 32), _r(1, 2, 64, 32), _r(1, 2, 64, 32))
    c = deplokit.compile(_sdpa(True), *inputs)
    assert [k.flash is not None for k in c.loop_ir.kernels] == [True]
    cost = next(n for n in _notes(c) if n.startswith("attention: cost:"))
    # 2 kv-head groups x 4 query tiles of 16 (8 blocks), each group's 4 heads dealt to 4 blocks
    # by the plan's grid fill (attention_plan._fill): 32 blocks on an H100's 132 SMs
    assert "grid fill: estimated" in cost and "32 blocks, fill 0.24" in cost and "the unfused kernels" in cost


def test_few_blocks_that_no_fill_step_can_add_stay_separate_kernels():
    """Seven query heads on one kv head, 128 queries of head_dim 128, not causal: flash is 8
    blocks (16 rows x 7 heads), fewer bytes than the three kernels but 8 SMs of 132 busy. The
    plan's one step, a block per head, would read K and V 7 times over (past 3x the
    compulsory bytes, attention_plan._fill), so it stays at 8 blocks; the estimate says the
    unfused kernels (scores dealt to many blocks) are faster, and the fusion is declined."""
    inputs = (_r(1, 7, 128, 128), _r(1, 1, 128, 128), _r(1, 1, 128, 128))
    c = deplokit.compile(_sdpa(False), *inputs)
    assert all(k.flash is None for k in c.loop_ir.kernels)
    why = " ".join(_notes(c) or (next(s for s in c.trace if s.name == "fuse_attention").skipped_reason,))
    assert "stay separate kernels" in why and "too few blocks for the SMs" in why and "8 blocks," in why
    assert "its plan: 8 blocks on 132 SMs; not more: 16 rows x 1 head a block would move" in why
    forced = deplokit.compile(_sdpa(False), *inputs, config={"fuse_attention.by_cost": False})
    assert [k.flash is not None for k in forced.loop_ir.kernels] == [True]
    assert any("fused without the cost check" in n and "too few blocks" in n for n in _notes(forced))
