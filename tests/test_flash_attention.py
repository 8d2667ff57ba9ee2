"""Flash attention in the IRs (passes/flash/attention*.py, flash/flash_tile.py): every
variant against eager on the loop and sim backends, the shape of its Loop and Tile IR, the
cost decision and its knob, causal tiles skipped, and the CUDA through nvcc."""
import math
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F
from programs import attention_programs

import deplokit
from deplokit.ir.tile_ir import Assign, AsyncWait, StridedLoop, walk
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import simulate_program

FLASH = {"fuse_attention.by_cost": False}


def _r(*shape, seed=[0]):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0]))


def _naive(q, k, v, m):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + m, dim=-1) @ v


def _sdpa(causal=False):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _masked(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _repeat_kv(q, k, v):
    """GQA written by hand: K and V repeated per query head, a triu mask."""
    k, v = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1]).triu(1).bool(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _dead_rows(s, t):
    """An additive mask whose rows 0 and 2 are fully masked (-inf everywhere)."""
    m = torch.randn(s, t)
    m[0] = float("-inf")
    m[2] = float("-inf")
    return m


def _bool_dead(s, t):
    m = torch.rand(1, 1, s, t) > 0.5
    m[..., 1, :] = False
    return m


# sdpa_one_key (T = 1) is two kernels (the softmax joins the scores): row fusion's, not flash's
CASES = {n: p for n, p in attention_programs(_r, torch.Generator().manual_seed(3)).items()
         if n not in ("sdpa_tinyllama_seq128", "sdpa_one_key")}
CASES.update({
    "causal_gqa_hd80_t70": (_sdpa(True), (_r(1, 4, 70, 80), _r(1, 2, 70, 80), _r(1, 2, 70, 80))),
    "causal_qwen_group7_hd96": (_sdpa(True), (_r(1, 7, 33, 96), _r(1, 1, 33, 96), _r(1, 1, 33, 96))),
    "noncausal_hd24_dv40": (_sdpa(), (_r(1, 2, 9, 24), _r(1, 2, 19, 24), _r(1, 2, 19, 40))),
    "decode_hd128": (_sdpa(), (_r(1, 4, 1, 128), _r(1, 2, 45, 128), _r(1, 2, 45, 128))),
    "causal_hd89_shared_q": (_sdpa(True), (_r(1, 2, 12, 89), _r(1, 1, 12, 89), _r(1, 1, 12, 89))),
    "causal_hd128_lanes_t40": (_sdpa(True), (_r(1, 4, 40, 128), _r(1, 2, 40, 128), _r(1, 2, 40, 128))),
    "repeat_interleave_gqa": (_repeat_kv, (_r(2, 6, 11, 16), _r(2, 2, 11, 16), _r(2, 2, 11, 16))),
    "naive_additive": (_naive, (_r(1, 2, 5, 8), _r(1, 2, 7, 8), _r(1, 2, 7, 6), _r(5, 7))),
    "naive_dead_rows_nan": (_naive, (_r(1, 2, 5, 8), _r(1, 2, 7, 8), _r(1, 2, 7, 8), _dead_rows(5, 7))),
    "bool_dead_rows": (_masked, (_r(2, 2, 6, 16), _r(2, 2, 10, 16), _r(2, 2, 10, 16), _bool_dead(6, 10))),
})


@lru_cache(maxsize=None)
def _compiled(name):
    fn, inputs = CASES[name]
    return deplokit.compile(fn, *inputs, config=FLASH)


@pytest.mark.parametrize("backend", ["loop", "sim"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_flash_matches_eager(name, backend):
    c = _compiled(name)
    assert [k.flash is not None for k in c.loop_ir.kernels] == [True], str(c.loop_ir)
    res = c.check(backend=backend, rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


@pytest.mark.parametrize("name", ["naive_dead_rows_nan", "bool_dead_rows"])
def test_fully_masked_rows_give_what_eager_gives(name):
    c = _compiled(name)
    fn, inputs = CASES[name]
    want = fn(*inputs)
    got = torch.as_tensor(c.run(*inputs, backend="sim"))
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.isnan(want).any() == (name == "naive_dead_rows_nan")


def test_flash_loop_ir_reads_like_online_softmax():
    text = str(_compiled("causal_gqa_hd80_t70").loop_ir)
    assert "# serial" in text and "maximum(" in text and "row_out[" in text and "local row_max[1]" in text
    assert "flash: a block owns" in text


def test_flash_tile_ir_shares_key_tiles_and_skips_causal_ones():
    c = _compiled("causal_qwen_group7_hd96")
    (k,) = c.tile_ir.kernels
    text = str(k)
    # 007 stages, 010 rings, 011 copies by tensor map (sm_90), 015 pipelines: causal too
    assert "k_smem = TmaBufferedStage(k" in text and "v_smem = TmaBufferedStage(v" in text
    # 3 query tiles x 1 kv head: the grid fill (attention_plan._fill) gives each head its blocks
    assert "16 query rows x 1 head (of the 7 sharing a kv head)" in text and "21 blocks on 132 SMs" in text
    assert "causal diagonal skipped" in text
    assert any(isinstance(s, StridedLoop) for s, _ in walk(k.body))       # the loop starts at the diagonal
    assert {s.dst for s, _ in walk(k.body) if isinstance(s, Assign)} >= {"row_max", "row_sum", "row_out", "s_tile"}
    # head_dim 96: 96 + 96 + 16 floats would crowd one thread's registers: neighbouring
    # threads share a row (a part of head_dim each, their partial scores of a key tile
    # transposed by shuffles: each lane the full scores of 16 / lanes keys, test_flash_scatter.py),
    # as many as keep an SM at 16 warps (flash/attention_plan._more_lanes)
    lanes = next(x.flash for x in c.loop_ir.kernels if x.flash is not None).lanes
    assert lanes > 1 and f"register q_reg[{96 // lanes}]" in text
    assert "Combine(s_tile, add, over=(a4l,), scatter 16 slots)" in text
    # head_dim 80 too (80 + 80 + 16 floats and the ring's addresses spilled at 255 registers on
    # sm_80: flash/flash_registers.py); head_dim 64 fits one thread but leaves 8 warps an SM
    for name, d in (("causal_gqa_hd80_t70", 80), ("sdpa_noncausal_hd64_odd", 64)):
        other = _compiled(name)
        lanes = next(x.flash for x in other.loop_ir.kernels if x.flash is not None).lanes
        assert lanes > 1 and f"register q_reg[{d // lanes}]" in str(other.tile_ir)
    # an odd head_dim that does not fit: the block's query rows staged in shared memory, padded
    odd = str(_compiled("causal_hd89_shared_q").tile_ir)
    assert "q_smem = AsyncStage(q" in odd and "pad=1" in odd and "register q_reg" not in odd
    # 001 tiles, 007 stages the key and value tiles, 010 gives them a ring, 011 copies them by
    # tensor map, 015 pipelines the key loop; every other tile pass says why it leaves the
    # kernel alone
    steps = {s.name: s for s in c.trace if s.stage == "tile"}
    applied = {"001_tileify", "007_stage_inputs", "010_double_buffer", "011_tma_copy", "015_pipeline_k_outer"}
    assert all(steps[n].changed for n in applied)
    assert all(s.skipped_reason for n, s in steps.items() if n not in applied)
    before = str(steps["007_stage_inputs"].before)
    assert "load k[" in before and "k_smem" not in before


def test_check_passes_runs_the_flash_kernel_after_every_pass():
    c = _compiled("naive_additive")
    checks = c.check_passes()
    assert checks and all(ch.result.ok for ch in checks), [str(ch) for ch in checks]


def _counters(c, inputs):
    env = dict(c.values)
    env.update(c._bind(inputs))
    stats: list = []
    simulate_program(c.kernel_ir, env, max_block_threads=1024, stats=stats)
    return sum(s.global_bytes_loaded for s in stats), sum(s.float_multiplies for s in stats)


def test_qwen_shaped_causal_gqa_meets_the_issue_targets():
    """28 query heads, 4 kv heads, head_dim 128 at seq 128 (issue 16's targets): global bytes
    loaded <= 3x the compulsory bytes of q, k, v and out; multiplies <= 0.6x the non-causal
    multiply-adds (the key tiles above the diagonal are skipped). The guard chooses flash."""
    heads, kv, seq, dim = 28, 4, 128, 128
    inputs = (_r(1, heads, seq, dim), _r(1, kv, seq, dim), _r(1, kv, seq, dim))
    c = deplokit.compile(_sdpa(True), *inputs)
    assert [k.flash is not None for k in c.loop_ir.kernels] == [True]
    notes = next(s for s in c.trace if s.name == "fuse_attention").notes
    assert any(n.startswith("attention: cost: flash attention moves") for n in notes), notes
    loaded, muls = _counters(c, inputs)
    compulsory = 4 * (2 * heads * seq * dim + 2 * kv * seq * dim)
    assert loaded <= 3 * compulsory, (loaded, compulsory)
    assert muls <= 0.6 * heads * seq * seq * (dim + dim), muls


def test_knob_turns_attention_fusion_off_and_trace_says_so():
    fn, inputs = CASES["causal_gqa_hd80_t70"]
    c = deplokit.compile(fn, *inputs, config={"fuse_attention.enable": False})
    assert all(k.flash is None for k in c.loop_ir.kernels)
    step = next(s for s in c.trace if s.name == "fuse_attention")
    assert "disabled" in step.skipped_reason


def test_guard_keeps_separate_kernels_where_flash_does_not_pay():
    """A single query row per head and key (T = 1): nothing to share; the guard says why."""
    inputs = (_r(1, 2, 1, 16), _r(1, 2, 1, 16), _r(1, 2, 1, 16))
    c = deplokit.compile(_sdpa(), *inputs)
    step = next(s for s in c.trace if s.name == "fuse_attention")
    assert all(k.flash is None for k in c.loop_ir.kernels) or "cost" in " ".join(step.notes)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_flash_cuda_compiles(target):
    fn, inputs = CASES["causal_qwen_group7_hd96"]
    c = deplokit.compile(fn, *inputs, config=FLASH, target=target)
    stats = c.nvcc().stats
    assert all(s.registers > 0 for s in stats.values())


@pytest.mark.parametrize("name", ["noncausal_hd24_dv40", "sdpa_noncausal_hd64_odd", "decode_hd128"])
def test_noncausal_key_tiles_are_double_buffered_and_pipelined(name):
    """010 gives the K/V tiles of a key loop from tile 0 a ring, 015 issues tile ko + stages - 1
    while tile ko computes (the simulator runs the ring: test_flash_matches_eager); on sm_90
    011 copies them by tensor map (test_flash_tma.py), cp.async where the rows forbid it."""
    c = _compiled(name)
    text = str(c.tile_ir)
    assert all(f"{t}_smem = TmaBufferedStage({t}" in text or f"{t}_smem = AsyncBufferedStage({t}" in text
               for t in "kv"), text
    assert "prefetch=" in text
    steps = {s.name: s for s in c.trace if s.stage == "tile"}
    assert steps["010_double_buffer"].changed and steps["015_pipeline_k_outer"].changed
    loop = next(s for s in c.tile_ir.kernels[0].tile().body if getattr(s, "kind", "") == "serial")
    assert isinstance(loop.body[0], AsyncWait)      # wait for tile ko, then issue the next ones


def test_causal_key_tiles_are_double_buffered_and_pipelined_from_the_diagonal():
    """The causal key loop starts at the block's diagonal tile: its ring numbers iterations
    from that start (tests/test_causal_ring.py runs it for every trip count)."""
    c = _compiled("causal_gqa_hd80_t70")
    steps = {s.name: s for s in c.trace if s.stage == "tile"}
    assert steps["010_double_buffer"].changed and steps["015_pipeline_k_outer"].changed
    loop = next(s for s in c.tile_ir.kernels[0].tile().body if getattr(s, "kind", "") == "serial")
    assert isinstance(loop, StridedLoop) and isinstance(loop.body[0], AsyncWait)
    assert "prefetch=" in str(c.tile_ir)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_pipelined_flash_cuda_compiles(target):
    fn, inputs = CASES["sdpa_noncausal_hd64_odd"]
    c = deplokit.compile(fn, *inputs, config=FLASH, target=target)
    assert "steady state: issue K tile" in str(c.cuda)      # 015: tile ko + 1 issued while tile ko computes
    stats = c.nvcc().stats
    assert all(s.registers > 0 for s in stats.values())


@pytest.mark.parametrize("name", ["causal_gqa_hd80_t70", "sdpa_noncausal_hd64_odd", "causal_qwen_group7_hd96",
                                  "decode_hd128"])
def test_key_reads_along_head_dim_are_16_bytes(name):
    """The score's head_dim loop runs 4 elements at a time (d = dq * 4 + dv) and each thread
    reads its key 16 bytes at once from the staged tile (one LDS.128), a row per thread or a
    row dealt to lanes (each lane owns runs of 4 adjacent elements)."""
    c = _compiled(name)
    (k,) = c.tile_ir.kernels
    widths = {s.tensor: s.shared_width for s, _ in walk(k.body) if getattr(s, "tensor", "") == "k_smem"}
    assert widths == {"k_smem": 4}, str(k)
    assert "reinterpret_cast<const float4*>(&k_smem[" in str(c.cuda)


def test_keys_read_through_a_gather_stay_three_kernels():
    """K rows chosen by data (a cache read at gathered positions, as Falcon's does) are no
    tile a stage can copy: attention fusion declines with a reason, and the result is right."""
    def gathered(q, k, v, pos):
        return F.scaled_dot_product_attention(q, k[:, :, pos], v[:, :, pos])
    q, k, v = _r(1, 2, 5, 16), _r(1, 2, 9, 16), _r(1, 2, 9, 16)
    pos = torch.tensor([8, 0, 3, 3, 7, 1])
    c = deplokit.compile(gathered, q, k, v, pos)
    assert not any(kn.name.startswith("flash") for kn in c.kernel_ir.kernels)
    step = next(s for s in c.trace if s.name == "fuse_attention")
    assert "a gather" in step.skipped_reason
    assert c.check(backend="sim").ok and c.check(backend="loop").ok
