"""Flash attention's grid fill (passes/flash/attention_plan.py _fill): with the target's SM
count, a plan of fewer blocks than SMs takes smaller query tiles or blocks serving a divisor
of the GQA group's heads, within FILL_BYTES x the compulsory bytes; the plan says why it
stopped, blocks and bytes agree with what flash/flash_tile.py deals, and the kernels
match eager on the simulator (test_flash_registers.py builds them for sm_80/sm_90: no spills)."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.passes.flash.attention_plan import FILL_BYTES, flash_blocks, flash_traffic
from deplokit.target import get_target

FLASH = {"fuse_attention.by_cost": False}
CASES = {   # heads, kv heads, seq, keys, head_dim, causal
    "causal_gqa4_subgrouped": (8, 2, 64, 64, 32, True),
    "noncausal_mha_smaller_tile": (4, 4, 128, 128, 32, False),
    "noncausal_gqa4_subgrouped": (8, 2, 64, 64, 32, False),
    "decode_gqa4": (8, 2, 1, 256, 64, False),
}


def _inputs(h, kvh, s, t, d, seed=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, h, s, d, generator=g), torch.randn(1, kvh, t, d, generator=g), \
        torch.randn(1, kvh, t, d, generator=g)


def _compile(h, kvh, s, t, d, causal, config=FLASH, target="sm_90"):
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # noqa: E731
    return deplokit.compile(fn, *_inputs(h, kvh, s, t, d), config=config, target=target)


def _flash(c):
    return next(k for k in c.loop_ir.kernels if k.flash is not None)


def _launched(c):
    k = next(k for k in c.kernel_ir.kernels if k.name.startswith("flash"))
    return k.grid[0] * k.grid[1] * k.grid[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_fill_adds_blocks_and_agrees_with_the_launch(name):
    c = _compile(*CASES[name])
    k, types = _flash(c), c.loop_ir.types()
    plan, sms = k.flash, get_target("sm_90").sm_count
    assert flash_blocks(k, plan) == _launched(c)
    assert f"on {sms} SMs" in plan.fill or f"to fill {sms} SMs" in plan.fill
    # every step taken stays within the byte budget; a step refused says it was over it
    compulsory = sum(types[n].numel * 4 for n in ("q", "k", "v")) + types[k.outputs[0]].numel * 4
    assert flash_traffic(k, plan, types).bytes <= FILL_BYTES * compulsory
    assert "blocks before" in plan.fill or "then" in plan.fill or "not more" in plan.fill


def test_subgroup_and_tile_steps_and_their_reasons():
    sub = _flash(_compile(*CASES["causal_gqa4_subgrouped"])).flash
    # 2 kv heads x 4 tiles = 8 blocks; 4 heads -> 2 -> 1 a block: 32 blocks, no step left
    assert (sub.group, sub.kv_group, sub.query_tile, sub.rereads) == (1, 4, 16, 4)
    assert "32 blocks on 132 SMs" in sub.fill and "no smaller query tile or head group remains" in sub.fill
    tile = _flash(_compile(*CASES["noncausal_mha_smaller_tile"])).flash
    # 64 rows (8 blocks) -> 32 rows (16 blocks); 16 rows would read K/V 8 times: over the budget
    assert tile.query_tile == 32 and tile.group == 1 and f"over {FILL_BYTES}x the compulsory" in tile.fill
    assert "1 head (of the 4 sharing a kv head)" in sub.text()
    decode = _flash(_compile(*CASES["decode_gqa4"])).flash
    assert (decode.group, decode.kv_group) == (2, 4)
    # by cost, the fill stops at the bytes of the three kernels: a decode row's few score bytes
    # leave no room for any K/V re-read
    by_cost = _compile(*CASES["decode_gqa4"], config={})
    kept = [k.flash for k in by_cost.loop_ir.kernels if k.flash is not None]
    assert len(kept) == 1 and kept[0].kv_group == 0 and "bytes of the kernels it replaces" in kept[0].fill


def test_extra_bytes_of_a_subgroup_are_counted():
    c = _compile(*CASES["noncausal_gqa4_subgrouped"])
    k, types = _flash(c), c.loop_ir.types()
    whole = type(k.flash)(k.flash.query, k.flash.heads, 4, k.flash.query_tile, k.flash.key_tile, False)
    kv = 2 * types["k"].numel * 4 * -(-64 // k.flash.query_tile)
    assert flash_traffic(k, k.flash, types).bytes - flash_traffic(k, whole, types).bytes == kv * (k.flash.rereads - 1)
    assert flash_blocks(k, k.flash) == flash_blocks(k, whole) * k.flash.rereads


def test_without_a_sm_count_the_plan_is_unfilled():
    from deplokit.passes.flash.attention_plan import plan_flash
    c = _compile(*CASES["causal_gqa4_subgrouped"])
    k = _flash(c)
    plain = plan_flash(k, c.loop_ir.types())
    assert plain.group == 4 and plain.kv_group == 0 and plain.fill == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_filled_plans_match_eager_on_the_simulator(name):
    res = _compile(*CASES[name]).check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


def test_guard_on_qwen_noncausal_seq128_says_why():
    """28 query heads on 4 kv heads (group 7, prime): the only step, 7 -> 1 heads a block,
    reads K/V 7x over (7.5x the compulsory bytes); the guard declines and says so."""
    c = _compile(28, 4, 128, 128, 128, False, config={})
    step = next(s for s in c.trace if s.name == "fuse_attention")
    notes = step.notes or (step.skipped_reason,)
    assert all(k.flash is None for k in c.loop_ir.kernels)
    why = next(n for n in notes if "stay separate kernels" in n)
    assert "slower: too few blocks for the SMs" in why
    assert "its plan: 32 blocks on 132 SMs" in why and "16 rows x 1 head a block would move" in why


def test_the_fill_stops_at_the_bytes_of_the_kernels_flash_replaces():
    """TinyLlama at seq 16 (32 heads on 4 kv heads, one 16-row tile): 1 head a block would
    move more than the three kernels, and the guard would then keep them; the fill stops at
    2 heads a block, under their bytes, and flash attention is chosen by default."""
    c = _compile(32, 4, 16, 16, 64, True, config={})
    k = _flash(c)
    step = next(s for s in c.trace if s.name == "fuse_attention")
    assert (k.flash.group, k.flash.kv_group) == (2, 8)
    assert "over the 425984 bytes of the kernels it replaces" in k.flash.fill
    assert flash_traffic(k, k.flash, c.loop_ir.types()).bytes <= 425984
    assert any("cost: flash attention moves 393216 bytes" in n for n in step.notes)
    assert c.check(backend="sim", rtol=1e-4, atol=1e-5).ok
