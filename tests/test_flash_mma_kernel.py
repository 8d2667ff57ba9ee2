"""Half attention's flash kernel on tensor cores (FlashPlan.mma, passes/flash/flash_mma*.py):
S = Q K^T and O += P V on mma.sync m16n8k16 (Q fragments in registers, K by ldmatrix, V by
ldmatrix.trans), the online softmax on the FP32 accumulators with quad shuffles, P packed to
half in registers. The simulator runs PTX's fragment tables, so these match eager within the
dtype's tolerance only when every lane map is right (a planted wrong P map fails); the CUDA
compiles for sm_80/90/120 and its hot loop is HMMA with few FFMA, the next K/V tile copied by
cp.async meanwhile."""
import pytest
import torch

import deplokit
from deplokit.ir.kernel_ir import walk_stmts
from deplokit.ir.kernel_mma import LdMatrix, Mma, PackHalves
from deplokit.passes.verify import verify
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sass import sass_available

F = torch.nn.functional


def _qkv(dtype, seq, d, heads, kv_heads, seed):
    torch.manual_seed(seed)
    q = torch.randn(1, heads, seq, d).to(dtype)
    k, v = (torch.randn(1, kv_heads, seq, d).to(dtype) for _ in range(2))
    return q, k, v


def _compile(q, k, v, causal, target="sm_80", config=None):
    return deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                            q, k, v, target=target, config=config or {})


def _instructions(c, kind):
    return [s for s in walk_stmts(c.kernel_ir.kernels[0].body) if isinstance(s, kind)]


@pytest.fixture(scope="module")
def causal_gqa():
    """Causal, 4 query heads on 2 kv heads, 37 rows (not a multiple of 16), bf16."""
    q, k, v = _qkv(torch.bfloat16, 37, 64, 4, 2, seed=3)
    return _compile(q, k, v, True)


def test_causal_gqa_bf16_matches_eager_on_tensor_cores(causal_gqa):
    c = causal_gqa
    kern = c.tile_ir.kernels[0]
    assert kern.flash.mma is not None and kern.flash.mma.causal and kern.flash.mma.kind == "bf16"
    assert "on tensor cores: mma.sync m16n8k16 bf16" in str(kern)
    # 64 / 16 k steps x 2 key groups for S, 64 / 8 value tiles for O; Q packed once, P per tile
    assert len(_instructions(c, Mma)) == 16 and len(_instructions(c, LdMatrix)) == 8
    assert {s.trans for s in _instructions(c, LdMatrix)} == {False, True}
    assert any(s.dst == "fm_pf" for s in _instructions(c, PackHalves))
    verify(c.kernel_ir)                 # Kernel IR's invariants (names declared, barriers uniform, ..)
    r = c.check(backend="sim")
    assert r.passed, str(r)


@pytest.mark.parametrize("dtype,seq,d,heads,kv_heads,causal", [
    (torch.bfloat16, 40, 64, 2, 2, False),         # non-causal, keys past T in the last tile
    (torch.float16, 50, 128, 2, 1, True),          # fp16, head_dim 128, all heads on one kv head
])
def test_half_flash_mma_matches_eager(dtype, seq, d, heads, kv_heads, causal):
    q, k, v = _qkv(dtype, seq, d, heads, kv_heads, seed=seq)
    c = _compile(q, k, v, causal)
    assert c.tile_ir.kernels[0].flash.mma is not None
    got = c.run(q, k, v, backend="sim")
    assert got.dtype == dtype
    r = c.check(backend="sim")
    assert r.passed, str(r)


def test_knob_off_float32_and_odd_head_dim_stay_on_ffma():
    q, k, v = _qkv(torch.bfloat16, 32, 64, 2, 2, seed=1)
    off = _compile(q, k, v, False, config={"fuse_attention.mma": "off"})
    assert off.tile_ir.kernels[0].flash.mma is None and not _instructions(off, Mma)
    f32 = _compile(q.float(), k.float(), v.float(), False)
    assert f32.tile_ir.kernels[0].flash.mma is None and not _instructions(f32, Mma)
    q, k, v = _qkv(torch.bfloat16, 32, 40, 2, 2, seed=1)
    odd = _compile(q, k, v, False)
    assert odd.tile_ir.kernels[0].flash.mma is None
    notes = [n for step in odd.trace if step.name == "fuse_attention" for n in step.notes]
    assert any("on FFMA (not tensor cores)" in n and "head_dim 40" in n for n in notes)


def test_a_wrong_p_fragment_map_fails_the_simulator(monkeypatch):
    """P's A fragment built from the wrong score accumulators (a1 and a2 swapped): the
    simulator's mma reads PTX's layout, so the attention is wrong."""
    from deplokit.ir import fragments
    from deplokit.passes.flash import flash_mma_lower

    def swapped(la, lc):
        r = fragments.accumulator_reuse(la, lc)
        s = list(r.sources)
        s[1], s[2] = s[2], s[1]
        return fragments.AccumulatorReuse(la, lc, tuple(s))

    monkeypatch.setattr(flash_mma_lower, "accumulator_reuse", swapped)
    q, k, v = _qkv(torch.bfloat16, 16, 16, 1, 1, seed=2)
    c = _compile(q, k, v, False)
    assert c.tile_ir.kernels[0].flash.mma is not None
    assert not c.check(backend="sim").passed


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_flash_mma_cuda_compiles(causal_gqa, arch):
    stats = causal_gqa.nvcc(arch).stats
    assert set(stats) == {k.name for k in causal_gqa.kernel_ir.kernels}
    assert all(s.registers and s.registers <= 255 and not s.spill_stores for s in stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_hot_loop_is_hmma_with_few_ffma(causal_gqa):
    c = causal_gqa
    mix = c.sass().kernel(c.kernel_ir.kernels[0].name).main_loop().mix
    assert mix.hmma == 16 and mix.ldsm == 8
    assert mix.ffma < mix.hmma * 4 and mix.lds == mix.lds64 == mix.lds128 == 0
    assert mix.ldgsts > 0               # the next key and value tiles arrive by cp.async
