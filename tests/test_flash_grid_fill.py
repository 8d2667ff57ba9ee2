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
    # 2 kv-head groups x 4 query tiles of 16: 8 blocks on an H100's 132 SMs
    assert "grid fill: estimated" in cost and "8 blocks, fill 0.06" in cost and "the unfused kernels" in cost


def test_one_block_over_many_keys_stays_separate_kernels():
    """One head, 64 queries, 4096 keys: flash is one block of 64 query rows streaming every
    key, fewer bytes than the three kernels but one SM of 132 busy; the estimate says the
    unfused kernels (scores dealt to many blocks) are faster, and the fusion is declined."""
    inputs = (_r(1, 1, 64, 64), _r(1, 1, 4096, 64), _r(1, 1, 4096, 64))
    c = deplokit.compile(_sdpa(False), *inputs)
    assert all(k.flash is None for k in c.loop_ir.kernels)
    why = " ".join(_notes(c) or (next(s for s in c.trace if s.name == "fuse_attention").skipped_reason,))
    assert "stay separate kernels" in why and "too few blocks for the SMs" in why and "1 block," in why
    forced = deplokit.compile(_sdpa(False), *inputs, config={"fuse_attention.by_cost": False})
    assert [k.flash is not None for k in forced.loop_ir.kernels] == [True]
    assert any("fused without the cost check" in n and "too few blocks" in n for n in _notes(forced))
