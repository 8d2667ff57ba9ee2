"""Every half matmul whose output splits into M and N blocks reaches tensor cores, however few
its rows: the grid plan (003) gives a tensor-core kernel block tiles whose warps own whole
16 x 8 mma tiles (fed ones where any fits, else whole ones: grid_plan._best_two), and a plan
wgmma would not take (under 64 rows) is made again for mma.sync (grid_plan.decide_for).
Before, 16- to 64-row outputs got 16 x 16 or 32 x 8 tiles of 4 warps, or one output a thread,
and ran on FMA (sm_80 9, sm_90 12, sm_120 19 of 64 shapes of benchmarks/tensor_core_reach.py)."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir.tile_ir import Loop, walk
from deplokit.passes.schedule.grid_plan import whole_warp_tiles

SHAPES = [(16, 64, 576), (16, 192, 576), (20, 1000, 576), (32, 64, 2048), (36, 192, 576), (48, 64, 576),
          (63, 2048, 576), (64, 64, 2048)]


def _matmul_kernel(c):
    """The matmul kernel (a split's reducer, summing float32 partials, aside)."""
    (kernel,) = [k for k in c.tile_ir.kernels if not k.reduces_for
                 and any(isinstance(s, Loop) and s.role == "K" for s, _ in walk(k.tile().body))]
    return kernel


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_a_few_rows_of_half_matmul_run_on_tensor_cores(target, m, n, k):
    x, w = torch.randn(1, m, k).bfloat16(), torch.randn(n, k).bfloat16()
    c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target=target)
    kernel = _matmul_kernel(c)
    assert kernel.mma is not None, f"{m}x{n}x{k} on {target}: FMA"


@pytest.mark.parametrize("target,m,n,k", [("sm_80", 16, 192, 576), ("sm_90", 20, 192, 576),
                                          ("sm_120", 32, 64, 2048), ("sm_90", 64, 64, 2048)])
def test_the_small_tensor_core_grids_match_eager_on_the_simulator(target, m, n, k):
    torch.manual_seed(m + n)
    x, w = torch.randn(1, m, k).bfloat16(), (torch.randn(n, k) / k ** 0.5).bfloat16()
    c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target=target)
    assert _matmul_kernel(c).mma is not None
    r = c.check(backend="sim")
    assert r.passed, str(r)


def test_whole_warp_tiles():
    assert whole_warp_tiles((8, 16), (2, 2))          # 16 x 32 of 4 warps: one 16 x 8 tile each
    assert not whole_warp_tiles((8, 16), (2, 1))      # 16 x 16: two tiles for four warps
    assert not whole_warp_tiles((16, 8), (2, 1))      # 32 x 8: two tiles for four warps
    assert not whole_warp_tiles((4, 4), (4, 2))       # 16 threads: no whole warp


def test_the_trace_says_when_wgmma_tiles_change_the_planned_grid():
    """003 plans a grid of register-block tiles; 008's wgmma tiles are 64 rows a warpgroup, so a
    skinny bf16 matmul launches another grid than 003's note says: 008 says which."""
    x, w = torch.randn(1, 96, 5632).bfloat16(), torch.randn(64, 5632).bfloat16()
    c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target="sm_90")
    (func,) = c.kernel_ir.kernels
    launched = func.grid[0] * func.grid[1] * func.grid[2]
    (step,) = [s for s in c.trace if s.name == "008_register_tile"]
    (note,) = [d.note for d in step.decisions if d.note]
    assert f": {launched} blocks on 132 SMs" in note and "of 003's plan" in note
