"""wgmma chosen by 008 (`008_register_tile.mma="wgmma"`, the default for a half matmul on
sm_90): warpgroups of 64 x N, operands copied by TMA (011) into boxes written in the 128-byte
swizzle of their rows (012), read by shared-memory matrix descriptors the lowering builds
(B of `a @ b` MN-major through the transpose bit, B of `x @ w.T` K-major), the accumulators
stored from the wgmma D fragment. Simulated against the exact product and eager; where the
geometry does not fit (odd rows TMA cannot copy, sm_80) 008 falls back to mma.sync and says
why; the CUDA compiles for sm_90a and its SASS main loop is HGMMA fed by UTMALDG."""
import dataclasses

import numpy as np
import pytest
import torch
from kernel_plant import plant

import deplokit
from deplokit.ir.kernel_ir import walk_stmts
from deplokit.ir.kernel_tma import TmaTensorLoad
from deplokit.ir.kernel_wgmma import Wgmma, WgmmaDescriptor, uses_wgmma
from deplokit.ir.tile_ir import Stage, WarpgroupMma, walk
from deplokit.passes.features import core_config
from deplokit.precision import unit_roundoff
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sass import sass_available
from deplokit.runtime.sim import SimulationError, simulate_program

NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _operands(m, k, n, dtype, seed=0, wt=False):
    torch.manual_seed(seed)
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(n, k).to(dtype) if wt else torch.randn(k, n).to(dtype)
    return a, b


def _close_to_exact(got, a, b, dtype):
    exact = a.double().numpy() @ b.double().numpy()
    scale = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    tol = unit_roundoff(NAME[dtype]) * np.abs(exact) + a.shape[1] * 2.0 ** -24 * scale
    err = np.abs(got.double().numpy() - exact)
    assert (err <= tol).all(), float((err - tol).max())


def _n_tile(n: int) -> dict:
    """The config that pins 008's wgmma N tile (where no grid balances, the plan's cheapest
    grid takes narrow ones: these tests are of the wide tiles' boxes and descriptors)."""
    return {"008_register_tile.wgmma_n": n}


def _wgmmas(kernel):
    return [s for s, _ in walk(kernel.tile().body) if isinstance(s, WarpgroupMma)]


def _remarks(c, name):
    return [r for st in c.trace if st.name == name for r in st.remarks]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_wgmma_is_the_default_on_sm_90_and_matches_the_exact_product(dtype):
    a, b = _operands(128, 128, 64, dtype)
    # no grid of a 128 x 64 output balances 132 SMs: the cheapest takes narrow N tiles
    # (grid_plan.wgmma_cheapest); at N tiles of 64, two blocks of one warpgroup
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(64))
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.wgmma == 64 and kern.mma.warps == (4, 1)
    assert c.kernel_ir.kernels[0].grid == (2, 1, 1)
    (mma,) = _wgmmas(kern)
    assert (mma.n, mma.dtype) == (64, "bf16" if dtype == torch.bfloat16 else "f16")
    stages = {s.name: s for s, _ in walk(kern.tile().body) if isinstance(s, Stage)}
    a_st, b_st = stages[mma.a], stages[mma.b]
    # TMA boxes of halves in the swizzle of their 128-byte rows: A 64 x 64 (K-major), B 64 x 64 (N-major)
    assert a_st.copy == b_st.copy == "tma" and a_st.tma.swizzle == b_st.tma.swizzle == 128
    assert a_st.tma.box == (64, 64) and b_st.tma.box == (64, 64) and a_st.dtype == NAME[dtype]
    assert "wgmma.m64n64k16" in str(c.tile_ir)
    kir = c.kernel_ir.kernels[0]
    descs = [s for s in walk_stmts(kir.body) if isinstance(s, WgmmaDescriptor)]
    assert {(d.leading_bytes, d.stride_bytes, d.swizzle) for d in descs} == {(16, 1024, 128), (8192, 1024, 128)}
    assert [s.b_mn_major for s in walk_stmts(kir.body) if isinstance(s, Wgmma)] == [True]
    text = str(c.kernel_ir)
    assert "wgmma.fence" in text and "wgmma.commit_group" in text and "wgmma.wait_group 0" in text
    got = c.run(a, b, backend="sim")
    assert got.dtype == dtype
    _close_to_exact(got, a, b, dtype)
    assert c.check(backend="sim").passed


def test_b_of_x_at_w_transposed_is_k_major_and_a_wider_n_tile():
    x, w = _operands(128, 192, 128, torch.bfloat16, seed=3, wt=True)
    c = deplokit.compile(lambda x, w: x @ w.T, x, w, target="sm_90", config=_n_tile(128))
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.wgmma == 128     # K-major B: no 64-column limit
    kir = c.kernel_ir.kernels[0]
    assert [s.b_mn_major for s in walk_stmts(kir.body) if isinstance(s, Wgmma)] == [False]
    _close_to_exact(c.run(x, w, backend="sim"), x, w.T, torch.bfloat16)


def test_partial_tiles_are_masked_by_the_copy_and_the_epilogue():
    """M = 200, N = 72: the last block's boxes cross the tensors' ends (TMA reads zeros: B's
    second box of 64 columns holds 8 of the tensor's) and its stores are guarded."""
    a, b = _operands(200, 192, 72, torch.bfloat16, seed=5)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(128))
    assert c.tile_ir.kernels[0].mma.wgmma == 128
    _close_to_exact(c.run(a, b, backend="sim"), a, b, torch.bfloat16)


def _b_stage(c):
    kern = c.tile_ir.kernels[0]
    (mma,) = _wgmmas(kern)
    return mma, next(s for s, _ in walk(kern.tile().body) if isinstance(s, Stage) and s.name == mma.b)


@pytest.mark.parametrize("m,k,n,boxes", [(128, 128, 128, 2), (200, 320, 72, 2), (256, 128, 256, 4)])
def test_b_of_a_at_b_wider_than_a_swizzle_row_is_boxes_side_by_side(m, k, n, boxes):
    """B of `a @ b` is MN-major: one 128-byte swizzled row holds 64 columns, so a wider N tile is
    boxes of 64 columns copied side by side (TmaBox.boxes), one box's bytes apart, which the
    descriptor's leading offset steps over; the ring's barrier expects every box's bytes."""
    a, b = _operands(m, k, n, torch.bfloat16, seed=m + n)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(64 * boxes))
    mma, b_st = _b_stage(c)
    assert mma.n == 64 * boxes and b_st.tma.box == (64, 64) and b_st.tma.boxes == boxes
    assert f"tmap=64x64*{boxes},swizzle=128B" in str(c.tile_ir)
    kir = c.kernel_ir.kernels[0]
    descs = {s.name: s for s in walk_stmts(kir.body) if isinstance(s, WgmmaDescriptor)}
    (wg,) = [s for s in walk_stmts(kir.body) if isinstance(s, Wgmma)]
    assert wg.b_mn_major and (descs[wg.b_desc].leading_bytes, descs[wg.b_desc].stride_bytes) == (64 * 128, 1024)
    copies = [s for s in walk_stmts(kir.body) if isinstance(s, TmaTensorLoad) and s.array == mma.b]
    a_copies = [s for s in walk_stmts(kir.body) if isinstance(s, TmaTensorLoad) and s.array == mma.a]
    assert len(copies) == boxes * len(a_copies)
    _close_to_exact(c.run(a, b, backend="sim"), a, b, torch.bfloat16)
    assert c.check(backend="sim").passed


def _b_leading_halved(s):
    if isinstance(s, WgmmaDescriptor) and s.leading_bytes > 16:
        return dataclasses.replace(s, leading_bytes=s.leading_bytes // 2)
    return s


def test_a_wrong_leading_offset_between_b_boxes_fails_the_simulator():
    """With two boxes along N the leading offset is read: half of it lands the columns 64.. in
    the first box's second half."""
    a, b = _operands(128, 128, 128, torch.bfloat16, seed=2)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(128))
    k = c.kernel_ir.kernels[0]
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    exact = a.double().numpy() @ b.double().numpy()
    wrong = dataclasses.replace(k, body=tuple(plant(k.body, _b_leading_halved)))
    assert wrong != k
    (got,) = simulate_program(dataclasses.replace(c.kernel_ir, kernels=(wrong,)), env)
    assert np.allclose(got[:, :64], exact[:, :64], rtol=1e-2, atol=0.5)
    assert not np.allclose(got[:, 64:], exact[:, 64:], atol=0.5)


def test_split_k_with_one_warpgroup_per_block():
    """128 x 2048 x 64: 003 splits K over blocks (partials added in split order) and the block's
    128 threads are one warpgroup of 64 x 16 (grid_plan.wgmma_plan: 2 x 4 tiles in 16 splits,
    128 blocks; 64 x 64 tiles would launch 16)."""
    a, b = _operands(128, 2048, 64, torch.float16, seed=9)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    kern = c.tile_ir.kernels[0]
    assert kern.split_k is not None and kern.mma.wgmma == 16 and kern.mma.warps == (4, 1)
    assert c.kernel_ir.kernels[0].grid[0] == 128
    _close_to_exact(c.run(a, b, backend="sim"), a, b, torch.float16)


def test_odd_shapes_fall_back_to_mma_sync_and_say_why():
    # rows of 61 halves (122 bytes) are no tensor-map stride: mma.sync m16n8k16 on cp.async
    a, b = _operands(128, 128, 61, torch.bfloat16, seed=7)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and not kern.mma.wgmma and kern.mma.shape.name == "m16n8k16.bf16"
    notes = " ".join(_remarks(c, "008_register_tile"))
    assert "wgmma: b_smem is no box a tensor map copies" in notes and "mma.sync m16n8k16 instead" in notes
    assert not uses_wgmma(c.kernel_ir.kernels[0])
    _close_to_exact(c.run(a, b, backend="sim"), a, b, torch.bfloat16)


def test_the_knob_and_other_targets():
    a, b = _operands(128, 128, 64, torch.bfloat16)
    on_80 = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config={"008_register_tile.mma": "wgmma"})
    assert not on_80.tile_ir.kernels[0].mma.wgmma
    assert any("wgmma exists on sm_90 (sm_90a) only, not sm_80" in r for r in _remarks(on_80, "008_register_tile"))
    half = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config={"008_register_tile.mma": "half"})
    assert not half.tile_ir.kernels[0].mma.wgmma
    assert not half.cuda.arch_specific and deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90").cuda.arch_specific
    f32 = deplokit.compile(lambda a, b: a @ b, a.float(), b.float(), target="sm_90")
    assert f32.tile_ir.kernels[0].mma is None
    # TMA switched off (the core with tensor cores): wgmma has no boxes to read, mma.sync it is
    no_tma = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=core_config(tensor_cores=True))
    kern = no_tma.tile_ir.kernels[0]
    assert kern.mma is not None and not kern.mma.wgmma
    assert any("the config sets 011_tma_copy.enable=False" in r for r in _remarks(no_tma, "008_register_tile"))
    _close_to_exact(no_tma.run(a, b, backend="sim"), a, b, torch.bfloat16)


def _transpose_dropped(s):
    return dataclasses.replace(s, b_mn_major=False) if isinstance(s, Wgmma) else s


def _a_stride_halved(s):
    if isinstance(s, WgmmaDescriptor) and s.leading_bytes == 16:
        return dataclasses.replace(s, stride_bytes=s.stride_bytes // 2)
    return s


@pytest.mark.parametrize("change", [_transpose_dropped, _a_stride_halved])
def test_a_planted_wrong_descriptor_fails_the_simulator(change):
    """A wrong transpose bit or stride reads other elements (or a slot still in flight)."""
    a, b = _operands(128, 128, 64, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    k = c.kernel_ir.kernels[0]
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    exact = a.double().numpy() @ b.double().numpy()
    (right,) = simulate_program(c.kernel_ir, env)
    assert np.allclose(right, exact, rtol=1e-2, atol=0.5)
    wrong = dataclasses.replace(k, body=tuple(plant(k.body, change)))
    try:
        (got,) = simulate_program(dataclasses.replace(c.kernel_ir, kernels=(wrong,)), env)
    except SimulationError as e:
        assert "before its data lands" in str(e)
        return
    assert not np.allclose(got, exact, atol=0.5)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_wgmma_matmul_compiles_for_sm_90a():
    a, b = _operands(256, 256, 128, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(128))
    source = c.cuda
    assert source.arch_specific and source.build_arch("sm_90") == "sm_90a"
    # N = 128: B of `a @ b` in two boxes of 64 columns side by side
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in str(source)
    result = compile_cuda(str(source), source.build_arch("sm_90"), kernel_names=source.kernels)
    assert all(s.spill_stores == 0 and s.registers > 0 for s in result.stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_main_loop_is_hgmma_fed_by_utmaldg():
    a, b = _operands(1024, 1024, 1024, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    kern = c.sass().kernel(c.kernel_ir.kernels[0].name)
    mix = kern.main_loop().mix
    assert mix.hgmma > 0 and mix.tma > 0
    assert mix.hmma == 0 and mix.ldsm == 0 and mix.lds == 0 and mix.ffma == 0 and mix.ldgsts == 0
    assert kern.spill_stores == 0


def test_host_encodes_half_tensor_maps():
    from deplokit.runtime.launch_plan import build_plan
    from deplokit.runtime.tensor_map import tensor_map_args

    a, b = _operands(128, 128, 64, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(64))
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    maps = [t.args for ln in plan.launches for t in ln.tensor_maps]
    assert [(m.data_type, m.box_bytes, m.swizzle) for m in maps] == [(9, 64 * 64 * 2, 3), (9, 64 * 64 * 2, 3)]
    # the ring's one arrival announces both boxes' bytes
    assert f'"r"({sum(m.box_bytes for m in maps)})' in str(c.cuda)

    args = tensor_map_args((4096, 4096), "bfloat16", (128, 64), 128)
    assert (args.data_type, args.box_bytes, args.global_strides, args.swizzle) == (9, 128 * 64 * 2, (8192,), 3)
    assert tensor_map_args((64, 64), "float16", (64, 64), 128).data_type == 6
    assert tensor_map_args((8, 8), "int64", (8, 8)).box_bytes == 512        # INT64 is 5 in cuda.h


def test_the_widest_n_tile_gives_way_to_a_balanced_grid():
    """The suite's tinyllama q_proj s128 in bf16 (128 x 2048 over K = 2048) at the knobs 003
    used to plan for it: 64 x 64 register-block tiles in 4 splits, 256 blocks (SM balance
    0.97); N 256 would leave 64 blocks (0.48) on 132 SMs, so 008 takes the widest N tile whose
    grid stays balanced, N 128, and says so (issue 26). By default the plan counts warpgroup
    tiles itself (grid_plan.wgmma_plan: 64 x 32 tiles, no split, 128 blocks)."""
    a, b = _operands(128, 2048, 2048, torch.bfloat16)
    knobs = {"003_split_matmul_k.splits": 4, "003_split_matmul_k.reduce": "in_kernel",
             "005_blockify_launch.thread_shape": "8x16", "008_register_tile.tm": 8, "008_register_tile.tn": 4}
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=knobs)
    (func,) = c.kernel_ir.kernels
    (mma,) = [s for s, _ in walk(c.tile_ir.kernels[0].tile().body) if isinstance(s, WarpgroupMma)]
    assert mma.n == 128 and func.grid[0] * func.grid[1] * func.grid[2] == 128
    step = next(s for s in c.trace if s.name == "008_register_tile")
    assert any("wgmma N tile 128: 128 blocks on 132 SMs, SM balance 0.97 (N 256: 64 blocks, 0.48)" in r
               for r in step.remarks)
    if nvcc_available():
        compile_cuda(str(c.cuda), c.cuda.build_arch("sm_90"), kernel_names=c.cuda.kernels)


def test_the_wgmma_n_knob_pins_a_fitting_tile_and_says_when_it_does_not():
    a, b = _operands(128, 128, 64, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(32))
    (mma,) = _wgmmas(c.tile_ir.kernels[0])
    assert mma.n == 32
    assert any("wgmma N tile 32, the knob's" in r for r in _remarks(c, "008_register_tile"))
    _close_to_exact(c.run(a, b, backend="sim"), a, b, torch.bfloat16)
    # 256 columns of a 64-column output would be three quarters padding: not a tile 008 tries
    wide = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90", config=_n_tile(256))
    (mma,) = _wgmmas(wide.tile_ir.kernels[0])
    assert mma.n != 256
    said = f"wgmma N tile 256 does not fit (64, 32, 16 do): {mma.n}"
    assert any(said in r for r in _remarks(wide, "008_register_tile"))
    (decision,) = [d for st in wide.trace if st.name == "008_register_tile" for d in st.decisions]
    assert dict(decision.used)["wgmma_n"] == mma.n
