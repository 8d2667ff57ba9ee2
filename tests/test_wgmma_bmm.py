"""Batched matmuls (bmm) on wgmma: with one batch entry a block (the batch a BLOCK axis, not
sharing the block's threads) and a block of whole warpgroups, 008's wgmma path stages each
operand as 3-D TMA boxes (1 x rows x 64, 128-byte swizzle; B's N tile of 128 two of them)
and reads it by descriptors like the 2-D matmul's; 015's producer/consumer schedule applies
too. The default grid plan gives a batch on sm_90 such blocks (grid_plan.wgmma_plan);
the first tests set the geometry by knobs (the tuner searches them), the later ones take the
defaults."""
import pytest
import torch

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_wgmma import uses_wgmma
from deplokit.ir.tile_ir import Stage, walk
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sass import sass_available

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


# default knobs: (4, 256, 128) @ (4, 128, 256), and an odd shape no tile divides (M 200, N 72)
DEFAULT_SHAPES = [((4, 256, 128), (4, 128, 256)), ((3, 200, 192), (3, 192, 72))]


def _default_bmm(shape_a, shape_b, dtype=torch.bfloat16, target="sm_90"):
    torch.manual_seed(5)
    a, b = torch.randn(*shape_a).to(dtype), torch.randn(*shape_b).to(dtype)
    return a, b, deplokit.compile(lambda a, b: a @ b, a, b, target=target)


def _remarks(c, name):
    return " ".join(str(r) for st in c.trace if st.name == name for r in st.remarks)


@pytest.mark.parametrize("shape_a,shape_b", DEFAULT_SHAPES)
def test_default_bmm_on_sm_90_runs_on_wgmma(shape_a, shape_b):
    a, b, c = _default_bmm(shape_a, shape_b)
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.wgmma > 0
    assert all(ax.kind == "BLOCK" for ax in kern.tile().axes if ax.role == "")     # one batch entry a block
    assert "on wgmma: blocks of 1 warpgroup(s) of 64 rows" in _remarks(c, "003_split_matmul_k")
    assert uses_wgmma(c.kernel_ir.kernels[0]) and "wgmma.mma_async" in str(c.cuda)
    got = c.run(a, b, backend="sim")
    exact = a.double() @ b.double()
    assert ((got.double() - exact).abs() <= 2.0 ** -7 * exact.abs() + 1e-3).all()
    assert c.check(backend="sim").passed


def test_default_bmm_on_sm_80_keeps_mma_sync_and_fp32_keeps_its_grid():
    _, _, c = _default_bmm(*DEFAULT_SHAPES[0], target="sm_80")
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and not kern.mma.wgmma and kern.mma.shape.name == "m16n8k16.bf16"
    assert "wgmma" not in _remarks(c, "003_split_matmul_k")
    _, _, f = _default_bmm(*DEFAULT_SHAPES[0], dtype=torch.float32)
    assert f.tile_ir.kernels[0].mma is None and "wgmma" not in _remarks(f, "003_split_matmul_k")


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
@pytest.mark.parametrize("shape_a,shape_b", DEFAULT_SHAPES)
def test_default_bmm_sass_is_hgmma(shape_a, shape_b):
    _, _, c = _default_bmm(shape_a, shape_b)
    kern = c.sass().kernel(c.kernel_ir.kernels[0].name)
    mix = kern.mix          # the whole kernel: nvcc unrolls a K loop of two chunks completely
    assert mix.hgmma > 0 and mix.tma > 0 and mix.hmma == 0 and mix.ldsm == 0 and kern.spill_stores == 0
