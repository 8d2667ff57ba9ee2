"""Fusion decided by cost (issue 16 part 3): row fusion happens only where the fusion guard
counts no more bytes moved and no more work than the kernels it would replace, the choice is
a knob (fuse_rows.by_cost), and the trace says why."""
import pytest
import torch
import torch.nn.functional as F
from programs import corpus

import deplokit
from deplokit.passes.fuse.guard import Traffic, fusion_pays
from deplokit.runtime.nvcc import nvcc_available

# Row fusion's own guard: attention fusion (test_flash_attention.py), tried first, is off.
ROWS_ONLY = {"fuse_attention.enable": False}

def _causal_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _rows_step(c):
    return next(s for s in c.trace if s.name == "fuse_rows")


def _qkv(heads, kv_heads, seq, keys, dim=128):
    torch.manual_seed(0)
    return torch.randn(1, heads, seq, dim), torch.randn(1, kv_heads, keys, dim), torch.randn(1, kv_heads, keys, dim)


def test_guard_refuses_a_fusion_that_moves_more_bytes_or_does_more_work():
    assert fusion_pays("x", Traffic(100, 10), Traffic(100, 10))[0]
    assert not fusion_pays("x", Traffic(101, 10), Traffic(100, 10))[0]
    assert not fusion_pays("x", Traffic(50, 11), Traffic(100, 10))[0]
    assert "2x the bytes" in fusion_pays("x", Traffic(200, 10), Traffic(100, 10))[1]


def test_qwen_causal_gqa_at_seq_512_is_not_row_fused():
    """One block per query row would re-read K and V (512 x 128 each) for each of the
    28 x 512 query rows: 7.5 GB against the unfused kernels' compulsory traffic."""
    heads, kv_heads, seq, dim = 28, 4, 512, 128
    c = deplokit.compile(_causal_gqa, *_qkv(heads, kv_heads, seq, seq), config=ROWS_ONLY)
    assert len(c.loop_ir.kernels) == 3 and not any(k.locals for k in c.loop_ir.kernels)
    step = _rows_step(c)
    assert not step.changed
    fused = heads * seq * (2 * seq * dim + 2 * dim) * 4          # K, V rows + q row + out row, per query row
    assert f"one block per row moves {fused} bytes" in step.skipped_reason
    assert "stay separate kernels" in step.skipped_reason
    unfused = int(step.skipped_reason.split("unfused ")[1].split(" ")[0])
    assert unfused < fused // 50


def test_decode_without_shared_kv_is_row_fused_and_says_why():
    """S = 1 and one query head per KV head: every K/V row is read by one query row only, so
    the fused kernel moves less than the unfused ones (no scores round trip)."""
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), *_qkv(4, 4, 1, 64, 32),
                         config=ROWS_ONLY)
    assert len(c.loop_ir.kernels) == 1 and c.loop_ir.kernels[0].locals
    notes = _rows_step(c).notes
    assert any(n.startswith("rows: cost: one block per row moves") for n in notes), notes
    assert c.check(backend="sim").ok


def test_the_knob_fuses_regardless_and_the_trace_says_so():
    inputs = _qkv(4, 2, 9, 9, 16)
    c = deplokit.compile(_causal_gqa, *inputs, config={**ROWS_ONLY, "fuse_rows.by_cost": False})
    assert len(c.loop_ir.kernels) == 1
    assert any("fused without the cost check (fuse_rows.by_cost)" in n for n in _rows_step(c).notes)
    default = deplokit.compile(_causal_gqa, *inputs, config=ROWS_ONLY)
    assert len(default.loop_ir.kernels) == 3
    for backend in ("loop", "sim"):
        assert default.check(backend=backend, rtol=1e-4, atol=1e-5).ok, backend


def test_simulator_counts_a_contractions_multiplies():
    from deplokit.runtime.sim import simulate_program
    a, b = torch.randn(8, 24), torch.randn(24, 16)
    c = deplokit.compile(lambda a, b: a @ b, a, b)
    env = dict(c.values)
    env.update(c._bind((a, b)))
    stats: list = []
    simulate_program(c.kernel_ir, env, stats=stats)
    assert sum(s.float_multiplies for s in stats) == 8 * 24 * 16


ATTENTION = {n: p for n, p in corpus().items() if n.startswith(("sdpa", "attention")) and n != "sdpa_tinyllama_seq128"}


@pytest.mark.parametrize("backend", ["loop", "sim"])
@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_the_guards_choice_matches_eager(name, backend):
    """Whatever the guard decides (row-fused or three kernels), the program is correct; the
    decision is in the trace either way."""
    fn, inputs = ATTENTION[name]
    c = deplokit.compile(fn, *inputs, config=ROWS_ONLY)
    step = _rows_step(c)
    said = " ".join(step.notes) if step.changed else step.skipped_reason
    assert ("cost: one block per row" in said) == step.changed or "more than the" in said, said
    assert c.check(backend=backend, rtol=1e-4, atol=1e-5).ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_both_choices_compile_with_nvcc(target):
    inputs = _qkv(4, 2, 9, 9, 16)
    for config in (ROWS_ONLY, {**ROWS_ONLY, "fuse_rows.by_cost": False}):
        c = deplokit.compile(_causal_gqa, *inputs, target=target, config=config)
        assert set(c.nvcc().stats) == set(c.cuda.kernels)
