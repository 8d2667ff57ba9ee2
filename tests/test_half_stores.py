"""A whole half model on tensor cores: a half op's value that a matmul or attention reads is
rounded to half where eager stores it (decompose.half_contraction_operands), stored in half by
fusion, and read raw by the tensor core (001 stamps the kernel's precision). Two matmuls of
half operands never share a kernel (an mma accumulates one sum), and a permuted operand
(attention's output before o_proj) is staged per K chunk, so wgmma's TMA ring takes it."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.frontend import hf, models
from deplokit.frontend.presets import PRESETS
from deplokit.ir.tile_ir import Loop, walk
from deplokit.passes.decompose.program import half_contraction_operands
from deplokit.passes.fuse.fusion import half_contractions
from deplokit.runtime.nvcc import nvcc_available

TINYLLAMA = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"


def _fuse_notes(c):
    return next(s for s in c.trace if s.name == "fuse").notes


def _has_k_loop(kernel) -> bool:
    """A matmul-like kernel: a K loop in its tile (a split's reducer aside)."""
    return not kernel.reduces_for and any(isinstance(s, Loop) and s.role == "K" for s, _ in walk(kernel.tile().body))


def test_a_half_op_before_a_matmul_is_stored_in_half_and_the_matmul_runs_on_tensor_cores():
    torch.manual_seed(0)
    x, g, w = torch.randn(64, 256).bfloat16(), torch.randn(256).bfloat16(), torch.randn(128, 256).bfloat16()
    c = deplokit.compile(lambda x, g, w: F.linear(x * g, w), x, g, w, target="sm_80")
    text = str(c.tensor_ir)
    assert "mul_bf16 = convert(mul) -> (64, 256) bfloat16" in text
    assert c.tensor_ir.stored_half == {"mul_bf16"}
    assert any(d.startswith("store mul_bf16: eager stores it in bfloat16") for d in _fuse_notes(c))
    matmul = [k for k in c.tile_ir.kernels if _has_k_loop(k)]
    assert len(matmul) == 1 and matmul[0].precision == "bfloat16" and matmul[0].mma is not None
    # eager rounds x * g to bf16 before the matmul; so does deplokit now: the same operands,
    # so the result is eager's to within the order of the FP32 sum and the output's rounding
    want = F.linear(x * g, w).float()
    got = c.run(x, g, w, backend="sim").float()
    assert ((got - want).abs() <= 2 ** -8 * want.abs() + 1e-2).all()
    assert c.check(backend="sim").passed


def test_half_operands_are_found_through_views_and_only_before_contractions():
    x, w = torch.randn(2, 8, 16).bfloat16(), torch.randn(32, 16).bfloat16()

    def f(x, w):
        y = torch.sigmoid(x)                       # read by the matmul through a transpose/reshape
        z = torch.exp(x)                           # read by nothing that contracts
        return F.linear(y.transpose(0, 1).reshape(8, 32), w.t()), z * 2

    c = deplokit.compile(f, x, w, target="sm_80")
    ops = {op.name: op.op for op in c.torch_ir.ops}
    found = half_contraction_operands(c.torch_ir)
    assert {ops[n] for n in found} == {"sigmoid"}
    # a float32 program rounds nothing
    c32 = deplokit.compile(f, x.float(), w.float(), target="sm_80")
    assert half_contraction_operands(c32.torch_ir) == set() and not c32.tensor_ir.stored_half


def test_swiglu_matmuls_of_half_operands_are_one_kernel_each():
    torch.manual_seed(1)
    x = torch.randn(1, 64, 128).bfloat16()
    gw, uw, dw = (torch.randn(192, 128) / 8).bfloat16(), (torch.randn(192, 128) / 8).bfloat16(), \
        (torch.randn(128, 192) / 8).bfloat16()

    def mlp(x, gw, uw, dw):
        return F.linear(F.silu(F.linear(x, gw)) * F.linear(x, uw), dw)

    c = deplokit.compile(mlp, x, gw, uw, dw, target="sm_90")
    assert len(half_contractions(c.tensor_ir)) == 3
    assert any("an mma accumulates one" in d for d in _fuse_notes(c))
    matmuls = [k for k in c.tile_ir.kernels if _has_k_loop(k)]
    assert len(matmuls) == 3 and all(k.precision == "bfloat16" and k.mma is not None for k in matmuls)
    assert c.check(backend="sim").passed


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_a_permuted_operand_is_staged_per_k_chunk(target):
    """o_proj reads attention's output (batch, heads, seq, head_dim) through a transpose: a box
    over all of K too. Staged once outside the K loop it was no TMA box per K step, and wgmma
    failed to lower (sm_90); per K chunk it is."""
    torch.manual_seed(2)
    a, w = torch.randn(1, 4, 128, 64).bfloat16(), (torch.randn(256, 256) / 16).bfloat16()
    c = deplokit.compile(lambda a, w: F.linear(a.transpose(1, 2).reshape(1, 128, 256), w), a, w, target=target)
    (k,) = c.tile_ir.kernels
    assert k.precision == "bfloat16" and k.mma is not None
    if target == "sm_90":
        assert k.mma.wgmma and "TmaBufferedStage(a," in str(k)
    assert c.check(backend="sim").passed


def _tiny_bf16_llama():
    """One Llama layer in bf16 at head_dim 64 (as the real models: a K chunk of 64 is one head)."""
    preset = models.tiny(PRESETS[TINYLLAMA], hidden=256, heads=4, kv_heads=2, intermediate=384, layers=1)
    torch.manual_seed(3)
    return hf.build_causal_lm(hf.config_from_preset(preset), preset.arch).to(torch.bfloat16).eval()


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_every_matmul_of_a_bf16_llama_runs_on_tensor_cores(target):
    model = _tiny_bf16_llama()
    ids = torch.randint(0, model.config.vocab_size, (1, 32))
    c = deplokit.compile(model, ids, target=target)
    matmuls = [k for k in c.tile_ir.kernels if k.flash is None and _has_k_loop(k)]
    # q, k, v, o, gate, up, down and the lm head, each an mma kernel reading half operands
    assert len(matmuls) == 8, [k.name for k in matmuls]
    off = [k.name for k in matmuls if k.precision != "bfloat16" or k.mma is None]
    assert not off, off
    r = c.check(ids, backend="loop")
    assert r.passed, str(r)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_a_bf16_llama_compiles_with_nvcc_for_sm_90():
    model = _tiny_bf16_llama()
    ids = torch.randint(0, model.config.vocab_size, (1, 128))
    c = deplokit.compile(model, ids, target="sm_90")
    matmuls = [k for k in c.tile_ir.kernels if k.flash is None and _has_k_loop(k)]
    assert len(matmuls) == 8 and all(k.mma is not None and k.mma.wgmma for k in matmuls)
    assert c.nvcc().stats


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_prefill_attention_over_a_half_cache_runs_on_tensor_cores(target):
    """The prefill program's causal mask compares the static cache's positions (loads in the
    score, per query row and key) and zeroes a fully masked row after the loop: the tensor-core
    flash kernel reads both per score element. 40 cache positions: the last key tile of 16 runs
    past the cache (its mask loads clamped, its scores -inf)."""
    import numpy as np
    from gguf_files import tiny_llama

    lm = deplokit.load_lm(tiny_llama(vocab=128), max_length=40, dtype="bfloat16", target=target)
    prompt = list(range(3, 23))
    flash = [k for k in lm.prefill_program(len(prompt)).tile_ir.kernels if k.flash is not None]
    assert flash and all(k.flash.mma is not None for k in flash)
    loop = np.asarray(lm.decoder.session("loop").prefill(prompt), dtype=np.float32)
    sim = np.asarray(lm.decoder.session("sim").prefill(prompt), dtype=np.float32)
    with torch.no_grad():
        eager = lm.model(torch.tensor([prompt])).logits[0, -1].float().numpy()
    scale = float(np.abs(eager).max())
    assert np.abs(sim - loop).max() <= 2 * 2 ** -8 * scale      # P rounded to bf16 before P @ V
    assert np.abs(sim - eager).max() <= 4 * 2 ** -8 * scale
    assert lm.generate(prompt, max_new_tokens=3, backend="sim") == lm.reference(prompt, 3)


def test_attention_probabilities_are_not_stored_so_naive_attention_stays_one_flash_kernel():
    """softmax(q k^T) @ v: P is a half op a matmul reads, but the flash kernel rounds it to half
    before P @ V itself; storing it would split the attention into three kernels."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 4, 64, 64).bfloat16() for _ in range(3))
    c = deplokit.compile(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1) @ v, q, k, v,
                         target="sm_80")
    assert not c.tensor_ir.stored_half
    (kernel,) = c.tile_ir.kernels
    assert kernel.flash is not None and kernel.flash.mma is not None


def test_under_64_rows_sm_90_plans_warps_mma_sync_can_build():
    """SmolLM2's k_proj in a 36-token prefill (36 x 192 over K 576): the grid plan for wgmma gave
    32 x 8 tiles of 4 warps, which mma.sync (008's choice under a warpgroup's 64 rows) cannot
    split into 16 x 8 warp tiles, so it ran on FMA."""
    torch.manual_seed(5)
    x, w = torch.randn(1, 36, 576).bfloat16(), (torch.randn(192, 576) / 24).bfloat16()
    c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target="sm_90")
    matmul = [k for k in c.tile_ir.kernels if _has_k_loop(k)]
    assert matmul and matmul[0].mma is not None and not matmul[0].mma.wgmma
    assert c.check(backend="sim").passed


def test_the_floor_of_a_half_matmul_is_at_the_tensor_core_rate():
    from deplokit.target import get_target
    from deplokit.tune.cost_model import first_principles_us

    a, b = torch.randn(512, 1024), torch.randn(1024, 1024)
    target = get_target("sm_90")
    fp32 = first_principles_us(deplokit.compile(torch.matmul, a, b).loop_ir, target)
    bf16 = first_principles_us(deplokit.compile(torch.matmul, a.bfloat16(), b.bfloat16()).loop_ir, target)
    flops = 2 * 512 * 1024 * 1024
    assert fp32 >= flops / (target.fp32_tflops * 1e6)
    assert bf16 < fp32 / 4 and bf16 >= flops / (target.tensor_rate("bf16") * 1e6)


def test_a_half_output_a_matmul_reads_counts_as_a_rounding_mid_way():
    """v0 = linear(x, w1) is an output and the next matmul's operand: rounded to bf16 where the
    second linear reads it, as in eager, so the float32 run is held to the eager tolerances
    (not to one final rounding: v1 carries v0's rounding)."""
    torch.manual_seed(6)
    x, w1, w2 = torch.randn(1, 3, 256).bfloat16(), torch.randn(64, 256).bfloat16(), torch.randn(32, 64).bfloat16()

    def two(x, w1, w2):
        v0 = F.linear(x, w1)
        return F.linear(v0, w2), v0

    c = deplokit.compile(two, x, w1, w2, target="sm_80")
    assert c.tensor_ir.stored_half and set(c.tensor_ir.stored_half) <= set(c.tensor_ir.outputs)
    r = c.check(backend="loop")
    assert r.passed, str(r)
    assert r.float32.rtol > 2 * 2 ** -8          # the eager tolerances, not one rounding's
