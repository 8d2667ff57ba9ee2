"""Batched half matmuls on tensor cores (008 mma=half): a bmm's batch THREAD axis stays outside
the warps (each batch slice is whole warps), so `a @ b` of 3-D bf16/fp16 operands and
attention's QK^T when it is not fused into flash run mma.sync m16n8k16 like a 2-D matmul.
Simulated against eager; a planted wrong fragment layout fails; the CUDA compiles with nvcc."""
import dataclasses

import numpy as np
import pytest
import torch

import deplokit
from deplokit.ir.tile_ir import THREAD
from deplokit.passes.lower import LOWERING
from deplokit.pipeline import Context, run_passes
from deplokit.precision import unit_roundoff
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import simulate_program

HALVES = [torch.bfloat16, torch.float16]
NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
F = torch.nn.functional


def _operands(a_shape, b_shape, dtype, seed=0):
    torch.manual_seed(seed)
    return torch.randn(*a_shape).to(dtype), torch.randn(*b_shape).to(dtype)


def _close_to_exact(got, a, b, dtype):
    """Within one rounding to the half output of the exact product (float64), plus FP32
    accumulation over K."""
    exact = a.double().numpy() @ b.double().numpy()
    scale = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    tol = unit_roundoff(NAME[dtype]) * np.abs(exact) + a.shape[-1] * 2.0 ** -24 * scale
    err = np.abs(got.double().numpy() - exact)
    assert (err <= tol).all(), float((err - tol).max())


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("a_shape,b_shape", [((8, 128, 64), (8, 64, 96)), ((3, 37, 45), (3, 45, 61))])
def test_half_bmm_runs_on_tensor_cores_and_matches_eager(dtype, a_shape, b_shape):
    a, b = _operands(a_shape, b_shape, dtype, seed=a_shape[1])
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    (kern,) = c.tile_ir.kernels
    assert kern.mma is not None and kern.mma.shape.name.startswith("m16n8k16")
    # a batch THREAD axis (if 003 made one) comes first: the M x N lanes below it are whole warps
    threads = [ax for ax in kern.tile().axes if ax.kind == THREAD]
    assert [ax.role for ax in threads[-4:]] == ["M", "N", "M", "N"]
    assert all(ax.role not in ("M", "N") for ax in threads[:-4])
    assert "mma.sync.aligned.m16n8k16" in c.cuda.text
    got = c.run(a, b, backend="sim")
    assert got.dtype == dtype
    _close_to_exact(got, a, b, dtype)
    r = c.check(backend="sim")
    assert r.passed, str(r)


@pytest.mark.parametrize("dtype", HALVES)
def test_unfused_attention_scores_run_on_tensor_cores(dtype):
    """Without flash, QK^T is a bmm of half operands: mma.sync. P stays float32 (the softmax's
    output), so P @ V keeps the exact FMA tile rather than rounding P to half."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 37, 64).to(dtype) for _ in range(3))
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
                         target="sm_80", config={"fuse_attention.enable": False})
    assert sum(kern.mma is not None for kern in c.tile_ir.kernels) == 1
    r = c.check(backend="sim")
    assert r.passed, str(r)


def test_planted_wrong_fragment_layout_fails_a_bmm():
    a, b = _operands((2, 32, 48), (2, 48, 64), torch.bfloat16, seed=7)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    mma = c.tile_ir.kernels[0].mma
    assert mma is not None
    env = {"a": a.float().numpy(), "b": b.float().numpy()}

    def relowered(**layouts):
        kernels = tuple(dataclasses.replace(k, mma=dataclasses.replace(k.mma, **layouts)) for k in c.tile_ir.kernels)
        program, _ = run_passes(LOWERING, dataclasses.replace(c.tile_ir, kernels=kernels), Context(c.target))
        return program

    (ok,) = simulate_program(relowered(), env)
    _close_to_exact(torch.from_numpy(ok).to(torch.bfloat16).float(), a, b, torch.bfloat16)
    # A's rows g and g + 8 crossed in every lane
    la = mma.layout_a
    bad_a = dataclasses.replace(la, coords=tuple((e[2], e[3], e[0], e[1], e[6], e[7], e[4], e[5]) for e in la.coords))
    (bad,) = simulate_program(relowered(layout_a=bad_a), env)
    assert np.abs(bad - (a.float() @ b.float()).numpy()).max() > 1.0


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_half_bmm_cuda_compiles(arch):
    a, b = _operands((3, 37, 45), (3, 45, 61), torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target=arch)
    assert c.tile_ir.kernels[0].mma is not None
    stats = c.nvcc().stats
    assert all(s.spill_stores == 0 for s in stats.values())


def test_a_balanced_sm_120_bmm_keeps_rows_ldmatrix_reads():
    # (4, 256, 128) @ (4, 128, 256) on sm_120 (170 SMs) takes a balanced batched grid. It used
    # to balance on 16 x 4 threads of 8 x 2 outputs, whose B slab has no 16-byte rows for
    # ldmatrix, and ran on FMA; the plan now keeps 8 N threads (grid_plan.slab_rows_fit)
    a, b = _operands((4, 256, 128), (4, 128, 256), torch.bfloat16, seed=4)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_120")
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.wgmma == 0
    step = next(s for s in c.trace if s.name == "003_split_matmul_k").decision(kern.name)
    assert "SM balance 0.9" in step.note
    got = c.run(a, b, backend="sim")
    _close_to_exact(got, a, b, torch.bfloat16)
    if nvcc_available():
        assert "mma.sync.aligned.m16n8k16" in str(c.cuda)
        c.nvcc("sm_120")
