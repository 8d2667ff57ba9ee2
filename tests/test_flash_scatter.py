"""Scores scattered over a row's lanes (FlashPlan.scatter, docs/flash_hd128.md): each lane sums
its part of head_dim for every key of a tile, one transposing Combine leaves it the full scores
of tile / lanes keys, the max, exp and sum run on those only and P is gathered back for P @ V.
The simulator matches eager (causal, GQA, keys not a multiple of the tile, 2 and 4 lanes), the
knob turns it off, and on sm_90 the key loop issues fewer shuffles and exps than the all-reduce."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir.tile_ir import Combine, walk
from deplokit.runtime.sass import sass_available

FLASH = {"fuse_attention.by_cost": False}
OFF = {**FLASH, "fuse_attention.scatter_scores": False}
CASES = {       # heads, kv heads, seq, keys, head_dim, causal
    "causal_gqa2_hd64_t19": (4, 2, 19, 19, 64, True),
    "noncausal_mqa_hd64_t21": (2, 1, 9, 21, 64, False),
    "causal_gqa2_hd128_t21": (4, 2, 21, 21, 128, True),
}


def _compile(heads, kv_heads, seq, keys, d, causal, config=FLASH):
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, heads, seq, d, generator=g), torch.randn(1, kv_heads, keys, d, generator=g),
              torch.randn(1, kv_heads, keys, d, generator=g))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # noqa: E731
    return deplokit.compile(fn, *inputs, config=config, target="sm_90")


def _plan(c):
    return next(k.flash for k in c.tile_ir.kernels if k.flash is not None)


def _combines(c):
    return [s for k in c.tile_ir.kernels if k.flash is not None for s, _ in walk(k.tile().body)
            if isinstance(s, Combine)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_scattered_scores_match_eager_on_the_simulator(name):
    c = _compile(*CASES[name])
    plan = _plan(c)
    assert plan.lanes > 1 and plan.scatter
    slots = {(s.acc, s.reduction, s.slots) for s in _combines(c)}
    assert ("s_tile", "sum", plan.key_tile) in slots and ("s_tile", "gather", plan.key_tile) in slots
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


def test_the_trace_says_how_the_scores_are_reduced_and_the_knob_turns_it_off():
    c = _compile(*CASES["causal_gqa2_hd64_t19"])
    plan = _plan(c)
    text = " ".join(n for s in c.trace for n in s.notes)
    assert f"each lane the full scores of {plan.key_tile // plan.lanes} keys of a tile" in text
    off = _compile(*CASES["causal_gqa2_hd64_t19"], config=OFF)
    assert not _plan(off).scatter and all(s.slots == 0 for s in _combines(off))
    assert "each lane the full scores" not in " ".join(n for s in off.trace for n in s.notes)
    assert "__shfl_xor_sync" in str(off.cuda) and "__shfl_xor_sync" in str(c.cuda)


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_scattered_scores_raise_the_key_loops_ffma_share_at_head_dim_128():
    """Non-causal GQA at head_dim 128, 4 lanes a row (sm_90, static counts of the hottest
    loop): the all-reduce shuffles every score log2 4 = 2 times and every lane runs the exp
    of all 16 keys; scattered, 12 shuffles reduce a tile, each lane exps its 4 keys and 16
    broadcasts hand P back. Measured: share 0.656 -> 0.682, 128 registers both (the launch
    bound keeps two blocks an SM), no spills (docs/flash_hd128.md)."""
    shape = (8, 2, 64, 64, 128, False)
    mixes, plans = [], []
    for config in (OFF, FLASH):
        c = _compile(*shape, config=config)
        name = next(k.name for k in c.kernel_ir.kernels if k.name.startswith("flash"))
        kernel = c.sass().kernel(name)
        mixes.append(kernel.hottest.mix)
        plans.append(_plan(c))
        assert kernel.spills == 0 and kernel.registers <= 168
    (before, after), (plain, scattered) = mixes, plans
    assert plain.lanes == scattered.lanes == 4 and scattered.scatter and not plain.scatter
    assert after.ffma_share > before.ffma_share + 0.01
    assert after.instructions < before.instructions
