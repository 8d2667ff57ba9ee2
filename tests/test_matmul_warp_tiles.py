"""Issue 14 part 2: thread shapes other than 16 x 16 (005's thread_shape), warp sub-tiles
(008's `warps` layout), A stored k-major (007's a_k_major), register quads as shared float4
loads, and the simulator's count of shared-memory wavefronts (bank conflicts)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import deplokit
from deplokit.analysis.banks import smem_loads
from deplokit.ir import kernel_ir as K
from deplokit.ir.tile_ir import THREAD, Stage, walk
from deplokit.passes.schedule import SCHEDULE
from deplokit.passes.schedule.block_shape import (
    THREAD_SHAPES,
    blocks_of,
    default_extents,
    default_thread_shape,
    loads_per_ffma,
    parse_shape,
)
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim.banks import wavefronts
from deplokit.runtime.sim.launch import simulate_program
from deplokit.target import get_target
from deplokit.tune.space import KernelSpace

SHAPE = "005_blockify_launch.thread_shape"
LAYOUT = "008_register_tile.layout"
K_MAJOR = "007_stage_inputs.a_k_major"
WARPS_K_MAJOR = {LAYOUT: "warps", K_MAJOR: True}


def compiled(m, n, k, config=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    return deplokit.compile(torch.matmul, a, b, config=config or {}), a, b


def after(c, name):
    return next(s.after for s in c.trace if s.name == name).kernels[0]


def simulated(c, a, b):
    """(max abs error against torch, the matmul kernel's SimStats)."""
    stats = []
    out = simulate_program(c.kernel_ir, {"x0": a.numpy(), "x1": b.numpy()}, stats=stats)
    return float(np.abs(out[0] - (a @ b).numpy()).max()), stats[0]


def test_default_thread_shape_gives_narrow_m_a_larger_register_block():
    # q_proj at 32 tokens: 16 threads along M leave 2 rows each (0.156 LDS.128 per FFMA);
    # 8 along M give 4 rows and a 4 x 4 block: 0.125
    shape = default_thread_shape(32, 3584, 132)
    t = parse_shape(shape)
    regs = default_extents(32, 3584, 132, t)
    assert t[0] * regs[0] == 32 and t[0] * t[1] >= 128
    assert loads_per_ffma(regs) <= 0.125 < loads_per_ffma(default_extents(32, 3584, 132))
    # square and wide outputs keep the article's 16 x 16 with 8 x 8 each
    for m, n in ((4096, 4096), (512, 18944)):
        assert default_thread_shape(m, n, 132) == "16x16"
        assert default_extents(m, n, 132, (16, 16)) == (8, 8)
    # M = 128: 8 x 16 threads keep 8 x 8 per thread where 16 x 16 would halve to 8 x 4
    t = parse_shape(default_thread_shape(128, 5632, 132))
    assert default_extents(128, 5632, 132, t) == (8, 8) and blocks_of(128, 5632, t, (8, 8)) == 88
    # one row: as many threads as a default shape puts along N (16: see block_shape.py)
    t = parse_shape(default_thread_shape(1, 3584, 132))
    assert t[1] == 16


@pytest.mark.parametrize("shape", ["8x32", "32x8", "4x16", "16x4"])
def test_blockify_honours_the_thread_shape(shape):
    c, a, b = compiled(128, 256, 64, {SHAPE: shape})
    k = after(c, "005_blockify_launch")
    assert [x.extent for x in k.tile().axes if x.kind == THREAD] == list(parse_shape(shape))
    assert c.kernel_ir.kernels[0].block[0] == np.prod(parse_shape(shape))
    err, _ = simulated(c, a, b)
    assert err < 1e-4


def test_thread_shape_and_layouts_are_in_the_tuners_space():
    c, _, _ = compiled(128, 256, 64)
    knobs = {k.name: k.domain for p in SCHEDULE for k in p.knobs}
    assert knobs["thread_shape"] == THREAD_SHAPES and "warps" in knobs["layout"] and knobs["a_k_major"] == (False, True)
    space = KernelSpace(c.loop_ir, "merged_matmul", get_target("sm_90"))
    pos = space.root
    while SCHEDULE[pos.depth].name != "005_blockify_launch":
        pos = space.forced(pos, [])
        if SCHEDULE[pos.depth].name != "005_blockify_launch":
            pos = space.options(pos)[0].after
    shapes = {v for _, after in space.results(pos.depth, pos.kernel) if after is not None
              for _, v in [(0, tuple(a.extent for a in after.tile().axes if a.kind == THREAD))]}
    assert len(shapes) >= 6              # distinct kernels: distinct options for the search
    leaf = space.default_leaf()
    assert dict(leaf.config)[SHAPE] == default_thread_shape(128, 256, 132)


ODD = [(1, 3, 31), (33, 127, 129), (31, 1, 33), (129, 33, 3), (3, 129, 127), (127, 31, 1000)]
CONFIGS = [{}, {LAYOUT: "warps"}, WARPS_K_MAJOR, {K_MAJOR: True},
           {SHAPE: "32x8", **WARPS_K_MAJOR}, {SHAPE: "4x16", LAYOUT: "warps"},
           {K_MAJOR: True, "013_async_copy.enable": False}]


@pytest.mark.parametrize("mnk", ODD)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda cfg: "-".join(f"{k.split('.')[-1]}={v}" for k, v in cfg.items())
                         or "default")
def test_odd_shapes_stay_simulator_correct(mnk, config):
    c, a, b = compiled(*mnk, config)
    err, _ = simulated(c, a, b)
    assert err < 1e-3 * max(1.0, float(np.abs((a @ b).numpy()).max()))


def test_warps_layout_with_k_major_a_is_conflict_free_in_model_and_simulator():
    # model (analysis/banks.py) and simulator (runtime/sim/banks.py) agree on each layout
    c, a, b = compiled(128, 256, 64, WARPS_K_MAJOR)
    k = c.tile_ir.kernels[0]
    assert all(ld.degree == 1 for ld in smem_loads(k))
    _, st = simulated(c, a, b)
    assert st.shared_load_wavefronts == st.shared_load_phases > 0
    # A stored [m][k] under the warps layout: a warp's 4 M-lanes read rows 4 apart, 2-way
    c, a, b = compiled(128, 256, 64, {LAYOUT: "warps"})
    degrees = {ld.stage: ld.degree for ld in smem_loads(c.tile_ir.kernels[0])}
    assert degrees == {"x0_smem": 2, "x1_smem": 1}
    _, st = simulated(c, a, b)
    assert st.shared_load_wavefronts > st.shared_load_phases
    # the default quads: conflict-free too
    c, a, b = compiled(128, 256, 64)
    _, st = simulated(c, a, b)
    assert st.shared_load_wavefronts == st.shared_load_phases


def test_simulator_wavefronts_of_one_access():
    shape = (1, 32)
    assert wavefronts(np.arange(32).reshape(1, 32), 1, None, shape) == (1, 1)       # consecutive
    assert wavefronts((np.arange(32) * 16).reshape(1, 32), 1, None, shape) == (16, 1)   # a column of 16-wide rows
    assert wavefronts(np.zeros((1, 32), dtype=np.int64), 1, None, shape) == (1, 1)  # a broadcast
    # float4: 4 phases of 8 lanes; 8 lanes reading 32 consecutive words are conflict-free
    assert wavefronts((np.arange(32) * 4).reshape(1, 32), 4, None, shape) == (4, 4)
    assert wavefronts((np.arange(32) * 8).reshape(1, 32), 4, None, shape) == (8, 4)   # 2-way each phase
    mask = np.arange(32).reshape(1, 32) < 8                      # only the first phase active
    assert wavefronts((np.arange(32) * 4).reshape(1, 32), 4, mask, shape) == (1, 1)


def test_k_major_a_stage_is_transposed_and_copied_by_rows_of_a():
    c, a, b = compiled(128, 256, 64, {**WARPS_K_MAJOR, "013_async_copy.enable": False, "011_tma_copy.enable": True})
    stage = next(s for s, _ in walk(after(c, "007_stage_inputs").tile().body) if isinstance(s, Stage) and s.tensor == "x0")
    assert [(ax.dim, ax.extent) for ax in stage.slab] == [(1, 16), (0, 16)]       # [k][m]
    # a tensor map copies slabs whose axes follow the tensor's dimensions: A's stays with the threads
    tma_step = next(s for s in c.trace if s.name == "011_tma_copy")
    assert any("x0_smem: slab axes run along dimensions (1, 0)" in r for r in tma_step.remarks)
    body = list(_all(c.kernel_ir.kernels[0].body))
    # the transposed copy: float4 along A's rows, stored down a column of the [k][m] slab
    assert any(isinstance(s, K.VectorLoad) and s.space == "global" and s.source == "x0" for s in body)
    assert sum(isinstance(s, K.SharedStore) and s.array == "x0_smem" for s in body) >= 4
    # the A fragment of a k: shared float4 loads
    assert any(isinstance(s, K.VectorLoad) and s.space == "shared" and s.source == "x0_smem" for s in body)
    err, _ = simulated(c, a, b)
    assert err < 1e-4


def _all(body):
    for s in body:
        yield s
        for name in ("body", "then", "orelse"):
            yield from _all(getattr(s, name, ()) or ())


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("config", [WARPS_K_MAJOR, {SHAPE: "8x32", **WARPS_K_MAJOR}, {SHAPE: "32x8", **WARPS_K_MAJOR}])
def test_new_layouts_build_for_every_target_without_spills(config):
    c, _, _ = compiled(1000, 1531, 777, config)
    for arch in ("sm_80", "sm_90", "sm_120"):
        stats = c.nvcc(arch).stats
        assert stats and all(s.spills == 0 for s in stats.values()), (arch, stats)
