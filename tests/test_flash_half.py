"""Half (bf16/fp16) attention through the flash kernel: the matcher keeps P @ V's
`convert(v) -> float32` with the value load, so a half SDPA is one flash kernel (FP32 online
softmax and FFMA, half storage) rather than three; it matches eager within the dtype's
tolerance on the simulator (causal, GQA, odd lengths, head_dim 64 and 128, decode) and its
CUDA compiles for sm_80/sm_90/sm_120."""
import pytest
import torch

import deplokit
from deplokit.runtime.nvcc import nvcc_available

F = torch.nn.functional
HALVES = [torch.bfloat16, torch.float16]


def _sdpa(dtype, seq, d, heads=2, kv_heads=2, keys=None, seed=0):
    torch.manual_seed(seed)
    keys = keys or seq
    q = torch.randn(1, heads, seq, d).to(dtype)
    k, v = (torch.randn(1, kv_heads, keys, d).to(dtype) for _ in range(2))
    return q, k, v


def _flash(c):
    return [kern for kern in c.tile_ir.kernels if getattr(kern, "flash", None)]


@pytest.mark.parametrize("dtype,seq,d,causal,kv_heads", [
    (torch.bfloat16, 37, 64, True, 2), (torch.float16, 37, 64, True, 2),
    (torch.float16, 100, 64, False, 1), (torch.bfloat16, 37, 128, True, 1)])
def test_half_sdpa_is_one_flash_kernel_matching_eager(dtype, seq, d, causal, kv_heads):
    q, k, v = _sdpa(dtype, seq, d, kv_heads=kv_heads, seed=seq + d)
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                         q, k, v, target="sm_80")
    assert len(c.tile_ir.kernels) == 1 and _flash(c)
    text = str(c.tile_ir.kernels[0])
    if c.tile_ir.kernels[0].flash.mma is not None:   # tensor cores: halves into mma.sync, FP32 accumulators
        assert "<- mma.m16n8k16." in text and f"convert(p) -> {str(dtype).split('.')[-1]}" in text
    else:
        assert "convert(" in text and "-> float32" in text       # the half values widened in the IR
    got = c.run(q, k, v, backend="sim")
    assert got.dtype == dtype
    r = c.check(backend="sim")
    assert r.passed, str(r)


@pytest.mark.parametrize("dtype", HALVES)
def test_half_decode_matches_eager(dtype):
    q, k, v = _sdpa(dtype, 1, 64, heads=4, kv_heads=2, keys=100, seed=9)
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v,
                         target="sm_80")
    r = c.check(backend="sim")
    assert r.passed, str(r)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_half_flash_cuda_compiles(arch):
    q, k, v = _sdpa(torch.bfloat16, 37, 64)
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
                         target=arch)
    assert _flash(c)
    stats = c.nvcc().stats
    assert set(stats) == {kern.name for kern in c.kernel_ir.kernels}
    assert all(s.registers and s.registers <= 255 for s in stats.values())
