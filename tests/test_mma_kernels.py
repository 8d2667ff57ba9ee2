"""Tensor-core matmul kernels end to end (008 mma=tf32): simulated against eager and against the
exact product of tf32-rounded operands, odd shapes with tails; a planted wrong fragment layout
fails the simulator; the CUDA compiles for sm_80/sm_90/sm_120 and nvcc's SASS main loop is HMMA
fed by LDSM (at most one LDSM per two HMMA on sm_80)."""
import dataclasses

import numpy as np
import pytest
import torch

import deplokit
from deplokit.ir.fragments import ptx_layout
from deplokit.passes.lower import LOWERING
from deplokit.pipeline import Context, run_passes
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sass import sass_available
from deplokit.runtime.sim import simulate_program
from deplokit.runtime.warp_mma import tf32_round

MMA = {"008_register_tile.mma": "tf32"}
F = torch.nn.functional


def _tf32_reference(a, b):
    """The exact product of the tf32-rounded operands (float64): what the tensor cores compute
    up to the FP32 accumulator's rounding."""
    ra = tf32_round(a.numpy()).astype(np.float64)
    rb = tf32_round(b.numpy()).astype(np.float64)
    return ra @ rb


def _close_to_tf32(got, a, b, bias=None):
    want = _tf32_reference(a, b) + (0 if bias is None else bias.numpy().astype(np.float64))
    scale = np.abs(_tf32_reference(a.abs(), b.abs())).max()
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("m,k,n", [(100, 72, 56), (256, 64, 128), (33, 24, 40)])
def test_simulated_mma_matches_eager(m, k, n):
    torch.manual_seed(m)
    a, b = torch.randn(m, k), torch.randn(k, n)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    assert c.tile_ir.kernels[0].mma is not None
    got = c.run(a, b, backend="sim")
    _close_to_tf32(got, a, b)
    # against eager FP32: within tf32's rounding (2^-11 relative per operand, K terms)
    eager = (a @ b).numpy()
    assert np.abs(got.numpy() - eager).max() < 2 ** -10 * np.sqrt(k) * a.abs().max().item() * b.abs().max().item()


def test_linear_with_bias_on_tensor_cores():
    torch.manual_seed(1)
    x, w, bias = torch.randn(48, 80), torch.randn(40, 80), torch.randn(40)
    c = deplokit.compile(lambda x, w, bias: F.linear(x, w, bias), x, w, bias, target="sm_90",
                         config=MMA, precision="tf32")
    k = next(k for k in c.tile_ir.kernels if k.mma is not None)
    b = [line for line in str(k).splitlines() if "= fragment B" in line]
    assert b and all("# ldmatrix.x" in line for line in b)      # w staged n-major: B's rows are slab rows
    _close_to_tf32(c.run(x, w, bias, backend="sim"), x, w.T.contiguous(), bias)


def _swap_a12(layout):
    return dataclasses.replace(layout, coords=tuple((e[0], e[2], e[1], e[3]) for e in layout.coords))


def _planted(c, **layouts):
    tile = c.tile_ir
    kernels = tuple(dataclasses.replace(k, mma=dataclasses.replace(k.mma, **layouts)) if k.mma else k
                    for k in tile.kernels)
    program, _ = run_passes(LOWERING, dataclasses.replace(tile, kernels=kernels), Context(c.target, precision="tf32"))
    return program


def test_planted_wrong_fragment_layout_fails_the_simulator():
    torch.manual_seed(2)
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    env = {"a": a.numpy(), "b": b.numpy()}
    # the stamped (PTX) layouts re-lowered: the product
    (ok,) = simulate_program(_planted(c), env)
    _close_to_tf32(ok, a, b)
    # A's elements 1 and 2 swapped in every lane (rows 8.. and columns 4.. crossed): the
    # addresses follow the wrong table, the simulated ldmatrix and mma.sync follow PTX's
    k = c.tile_ir.kernels[0]
    (bad,) = simulate_program(_planted(c, layout_a=_swap_a12(k.mma.layout_a)), env)
    assert np.abs(bad - (a @ b).numpy()).max() > 1.0
    # B's two registers swapped: wrong too, through the per-element loads
    lb = k.mma.layout_b
    (bad_b,) = simulate_program(_planted(c, layout_b=dataclasses.replace(
        lb, coords=tuple((e[1], e[0]) for e in lb.coords))), env)
    assert np.abs(bad_b - (a @ b).numpy()).max() > 1.0


def test_kernel_ir_and_cuda_spell_the_instructions():
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    kir, cuda = str(c.kernel_ir), str(c.cuda)
    assert "= ldmatrix.x4 shared a_smem[" in kir and "+= mma.m16n8k8.tf32(acc0_a[" in kir
    assert "= cvt.rna.tf32(acc0_b[" in kir
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" in cuda
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}" in cuda
    assert 'cvt.rna.tf32.f32 %0, %1;' in cuda
    again = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    assert str(c.cuda) == str(again.cuda)


def test_fragment_text_in_the_ir_is_the_stamp():
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    k = c.tile_ir.kernels[0]
    assert k.mma.layout_a == ptx_layout(k.mma.shape, "A")
    assert k.mma.layout_a.text() in str(k)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_mma_cuda_compiles(arch):
    a, b = torch.randn(100, 72), torch.randn(72, 56)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target=arch, config=MMA, precision="tf32")
    assert c.tile_ir.kernels[0].mma is not None
    stats = c.nvcc().stats
    assert all(s.spill_stores == 0 for s in stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_main_loop_is_hmma_fed_by_ldsm():
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=MMA, precision="tf32")
    main = c.sass().kernel(c.kernel_ir.kernels[0].name).main_loop()
    mix = main.mix
    assert mix.hmma > 0 and mix.ldsm > 0 and mix.ffma == 0
    assert 2 * mix.ldsm <= mix.hmma


def test_ldmatrix_from_a_swizzled_tma_box():
    """sm_90: A lands by TMA in a 64-byte swizzle; the ldmatrix row addresses are XOR-swizzled
    like every other read of the box, and the product stays exact (the K tail too). 007's
    round_tf32 prologue is dropped by 008 (the fragments round), so the stage is bytes TMA copies."""
    torch.manual_seed(3)
    a, b = torch.randn(520, 136), torch.randn(136, 264)
    cfg = MMA | {"011_tma_copy.enable": True, "003_split_matmul_k.splits": 1}
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=cfg, precision="tf32")
    text = str(c.tile_ir)
    assert "tmap=64x16,swizzle=64B" in text and "# ldmatrix.x4" in text
    _close_to_tf32(c.run(a, b, backend="sim"), a, b)
