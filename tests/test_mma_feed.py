"""Tensor cores kept fed (issue 25): at default knobs a bf16 matmul's warps read at most one
ldmatrix per two mma.sync. grid_plan keeps only block tiles whose warps own at least 32 x 32
(mma_fed) when it rebalances the grid of a tensor-core matmul (1024^2 on sm_80's 108 SMs was
four warps of 32 x 16 a block: 3 LDSM per 4 HMMA); nvcc's SASS shows the ratio; the grids it
picks instead (fewer, wider warps; split K) simulate to the exact product."""
import numpy as np
import pytest
import torch

import deplokit
from deplokit.analysis.occupancy import balanced
from deplokit.passes.mma.mma_tile import fragment_loads
from deplokit.passes.schedule.grid_plan import decide, mma_fed
from deplokit.precision import unit_roundoff
from deplokit.runtime.sass import sass_available
from deplokit.target import get_target

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (1000, 520, 776)]      # m, k, n


def _operands(m, k, n, seed=0):
    torch.manual_seed(seed)
    return torch.randn(m, k).to(torch.bfloat16), torch.randn(k, n).to(torch.bfloat16)


def _ratio(kernel) -> float:
    fm, fn = kernel.mma.tiles
    return fragment_loads(fm, fn) / (fm * fn)


def test_fed_block_tiles():
    assert not mma_fed((16, 8), (4, 4))        # 64 x 32 in 4 warps of 32 x 16: 3 ldmatrix per 4 mma
    assert mma_fed((8, 8), (8, 4))             # the same tile in 2 warps of 32 x 32: 4 per 8
    assert mma_fed((16, 16), (8, 8))           # 128 x 128 in 8 warps of 64 x 32: 6 per 16
    assert not mma_fed((4, 4), (4, 4))         # 16 threads: not whole warps
    assert fragment_loads(2, 4) == 4 and fragment_loads(2, 3) == 5     # B tiles in pairs (.x4) when even


def test_the_balanced_grid_of_a_tensor_core_matmul_feeds_its_warps():
    sm80 = get_target("sm_80")
    fp32, _ = decide(1024, 1024, 64, 16, sm80, 1, False)
    assert fp32 is not None and (fp32.threads, fp32.regs) == ((16, 8), (4, 4))   # the FMA grid is unchanged
    half, why = decide(1024, 1024, 64, 16, sm80, 1, True, True)
    assert half is not None and mma_fed(half.threads, half.regs) and balanced(half.blocks, sm80.sm_count)
    assert "one ldmatrix per two mma.sync" in why
    wgmma, _ = decide(1024, 1024, 64, 16, sm80, 1, True, False)    # no ldmatrix to feed: the FMA grid's
    assert wgmma is not None and (wgmma.threads, wgmma.regs) == ((16, 8), (4, 4))


@pytest.mark.parametrize("m,k,n", SHAPES + [(2048, 1024, 512), (32, 4096, 4096)])
def test_default_warp_tiles_read_one_ldmatrix_per_two_mma(m, k, n):
    a, b = _operands(m, k, n)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    kernels = [t for t in c.tile_ir.kernels if t.mma is not None]
    assert kernels and all(_ratio(t) <= 0.5 for t in kernels), [(t.mma.warps, t.mma.tiles) for t in kernels]


@pytest.mark.parametrize("config", [
    # 1024^2's default on sm_80: 64 x 64 tiles of 4 warps of 32 x 32, K split in 2
    {"005_blockify_launch.thread_shape": "8x16", "008_register_tile.tm": 8, "008_register_tile.tn": 4,
     "003_split_matmul_k.splits": 2},
    # two warps of 32 x 32 (64 threads)
    {"005_blockify_launch.thread_shape": "8x8", "008_register_tile.tm": 8, "008_register_tile.tn": 4},
])
def test_fed_grids_simulate_to_the_exact_product(config):
    a, b = _operands(96, 160, 80, seed=5)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config=config)
    (kern,) = [t for t in c.tile_ir.kernels if t.mma is not None]
    assert kern.mma.tiles == (2, 4) and _ratio(kern) == 0.5
    got = c.run(a, b, backend="sim").double().numpy()
    exact = a.double().numpy() @ b.double().numpy()
    scale = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    tol = unit_roundoff("bfloat16") * np.abs(exact) + a.shape[1] * 2.0 ** -24 * scale
    assert (np.abs(got - exact) <= tol).all()
    assert c.check(backend="sim").passed


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_sass_main_loop_reads_one_ldsm_per_two_hmma(m, k, n):
    a, b = _operands(m, k, n)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    name = next(t.name for t in c.tile_ir.kernels if t.mma is not None)
    kern = c.sass().kernel(name)
    loop = kern.main_loop()
    # a short K loop (1024^2 split in 2: 32 steps) nvcc unrolls whole: count the whole kernel
    # (its split-K tail's shared loads are no operand's)
    mix = loop.mix if loop is not None else kern.mix
    assert mix.hmma > 0 and mix.ldsm > 0 and mix.ffma == 0 and (loop is None or mix.lds == 0)
    assert 2 * mix.ldsm <= mix.hmma, (mix.hmma, mix.ldsm)
    assert kern.spill_stores == 0
