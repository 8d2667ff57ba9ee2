"""Batched matmuls (bmm) on wgmma: with one batch entry a block (the batch a BLOCK axis, not
sharing the block's threads) and a block of whole warpgroups, 008's wgmma path stages each
operand as 3-D TMA boxes (1 x rows x 64, 128-byte swizzle; B's N tile of 128 two of them)
and reads it by descriptors like the 2-D matmul's; 015's producer/consumer schedule applies
too. The default grid plan of a small batch still picks mma.sync tiles (SM balance), so here
the knobs ask for the geometry (the tuner searches them)."""
import pytest
import torch

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.tile_ir import Stage, walk
from deplokit.runtime.nvcc import compile_cuda, nvcc_available

GEOMETRY = {"005_blockify_launch.thread_shape": "16x16", "008_register_tile.tm": 4, "008_register_tile.tn": 4,
            "003_split_matmul_k.splits": 1}


def _bmm(dtype, warp_specialize):
    torch.manual_seed(11)
    a, b = torch.randn(3, 200, 192).to(dtype), torch.randn(3, 192, 72).to(dtype)
    config = {**GEOMETRY, "015_pipeline_k_outer.warp_specialize": warp_specialize}
    return a, b, deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=config)


@pytest.mark.parametrize("dtype,ws", [(torch.bfloat16, False), (torch.float16, True)])
def test_bmm_on_wgmma_matches_eager_at_an_odd_shape(dtype, ws):
    a, b, c = _bmm(dtype, ws)
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.wgmma == 128      # N = 72 in one tile of 128
    batch = [ax for ax in kern.tile().axes if ax.role not in ("M", "N")]
    assert batch and all(ax.kind == "BLOCK" for ax in batch if ax.role == "")
    boxes = {s.name: (s.tma.box, s.tma.boxes) for s, _ in walk(kern.tile().body) if isinstance(s, Stage)}
    # B: two boxes of 64 columns side by side (its 128-byte swizzled rows hold 64)
    assert sorted(boxes.values()) == [((1, 64, 64), 2), ((1, 128, 64), 1)]
    roles = [s for s in K.walk_stmts(c.kernel_ir.kernels[0].body) if isinstance(s, K.If) and s.roles]
    assert len(roles) == (1 if ws else 0)
    got = c.run(a, b, backend="sim")
    exact = a.double() @ b.double()
    assert ((got.double() - exact).abs() <= 2.0 ** -7 * exact.abs() + 1e-3).all()
    assert c.check(backend="sim").passed


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_bmm_on_wgmma_compiles_with_3d_tensor_maps():
    _, _, c = _bmm(torch.bfloat16, True)
    source = c.cuda
    text = str(source)
    assert "cp.async.bulk.tensor.3d" in text and "wgmma.mma_async" in text
    result = compile_cuda(text, source.build_arch("sm_90"), kernel_names=source.kernels)
    assert all(s.spill_stores == 0 and s.registers > 0 for s in result.stats.values())
