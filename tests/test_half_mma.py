"""bf16 and fp16 matmuls on tensor cores (008 mma=half, the default for half operands on sm_80+):
mma.sync m16n8k16 with FP32 accumulate, the operands staged in shared memory as halves (16-byte
cp.async of 8 halves, rows padded so ldmatrix reads them without bank conflicts), ldmatrix (.x4,
.x4.trans: two B tiles at once) into packed 32-bit registers. Simulated against eager and against the exact product
of the half operands at odd shapes (K tails too); a planted wrong fragment layout fails the
simulator; the CUDA compiles for sm_80/sm_90/sm_120; nvcc's sm_80 main loop is HMMA fed by LDSM."""
import dataclasses

import numpy as np
import pytest
import torch

import deplokit
from deplokit.ir.tile_ir import Stage, walk
from deplokit.passes.lower import LOWERING
from deplokit.pipeline import Context, run_passes
from deplokit.precision import unit_roundoff
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sass import sass_available
from deplokit.runtime.sim import simulate_program
from deplokit.runtime.warp_mma import half_bits, half_values

HALVES = [torch.bfloat16, torch.float16]
NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _operands(m, k, n, dtype, seed=0):
    torch.manual_seed(seed)
    return torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)


def _close_to_exact(got, a, b, dtype):
    """Within one rounding to the half output of the exact product of the half operands
    (float64), plus FP32 accumulation over K."""
    exact = a.double().numpy() @ b.double().numpy()
    scale = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    k = a.shape[1]
    tol = unit_roundoff(NAME[dtype]) * np.abs(exact) + k * 2.0 ** -24 * scale
    err = np.abs(got.double().numpy() - exact)
    assert (err <= tol).all(), float((err - tol).max())


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,n,k", [(37, 61, 45), (128, 96, 80)])
def test_half_matmul_on_tensor_cores_matches_eager(dtype, m, n, k):
    a, b = _operands(m, k, n, dtype, seed=m)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    kern = c.tile_ir.kernels[0]
    assert kern.mma is not None and kern.mma.shape.name == f"m16n8k16.{'bf16' if dtype == torch.bfloat16 else 'f16'}"
    assert kern.precision == NAME[dtype]
    # the operands' stages hold halves (2 bytes an element)
    stages = [s for s, _ in walk(kern.tile().body) if isinstance(s, Stage)]
    assert stages and all(s.dtype == NAME[dtype] for s in stages)
    got = c.run(a, b, backend="sim")
    assert got.dtype == dtype
    _close_to_exact(got, a, b, dtype)
    r = c.check(backend="sim")
    assert r.passed, str(r)


def test_the_knob_turns_tensor_cores_off_and_tf32_is_refused_for_half():
    a, b = _operands(64, 32, 64, torch.bfloat16)
    off = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config={"008_register_tile.mma": "off"})
    assert off.tile_ir.kernels[0].mma is None
    tf32 = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80", config={"008_register_tile.mma": "tf32"})
    assert tf32.tile_ir.kernels[0].mma is None
    assert "mma: tf32 inputs need precision='tf32'" in str(tf32.trace)


def test_float32_matmul_stays_exact_fp32():
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    assert c.tile_ir.kernels[0].mma is None and c.tile_ir.kernels[0].precision == "float32"


def test_kernel_ir_and_cuda_spell_packed_half_fragments():
    a, b = _operands(64, 32, 64, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    kir, cuda = str(c.kernel_ir), str(c.cuda)
    assert "b32 acc0_a[" in kir and "shared bf16 a_smem[" in kir
    assert "= ldmatrix.x4 shared a_smem[" in kir and "= ldmatrix.x4.trans shared b_smem[" in kir
    # B's two adjacent n tiles in one ldmatrix: the Tile IR says so
    assert "+0..2] = fragment B b_smem[" in str(c.tile_ir) and "# ldmatrix.x4.trans" in str(c.tile_ir)
    assert "+= mma.m16n8k16.bf16(acc0_a[" in kir and "cvt.rna" not in kir
    assert "cp.async 16B shared a_smem[" in kir
    assert "unsigned acc0_a[" in cuda and "__shared__ __align__(16) __nv_bfloat16 a_smem[" in cuda
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in cuda
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}" in cuda
    again = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    assert str(c.cuda) == str(again.cuda)


def test_ldmatrix_rows_are_conflict_free():
    """014 pads the half slabs by 8 halves (16 bytes): every ldmatrix phase reads 8 rows in 8
    distinct groups of 4 banks, and the simulator counts no extra wavefront."""
    a, b = _operands(128, 64, 128, torch.float16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    stages = [s for s, _ in walk(c.tile_ir.kernels[0].tile().body) if isinstance(s, Stage)]
    assert all(s.pad == 8 and (s.slab[-1].extent + s.pad) % 8 == 0 for s in stages)
    stats: list = []
    simulate_program(c.kernel_ir, {"a": a.float().numpy(), "b": b.float().numpy()}, stats=stats)
    st = stats[0]
    assert st.shared_load_wavefronts == st.shared_load_phases
    # every byte cp.async brings from global memory lands in shared memory: 2 bytes a half
    assert st.shared_bytes_stored == st.global_bytes_loaded > 0


def test_simulator_counts_half_bytes():
    """A bf16 buffer's elements are 2 bytes on the device though the simulator holds them in
    float32: its global byte counters count 2."""
    x = torch.randn(1000).to(torch.bfloat16)
    c = deplokit.compile(lambda x: x * 2.0, x, target="sm_80")
    stats: list = []
    simulate_program(c.kernel_ir, {"x": x.float().numpy()}, stats=stats)
    assert sum(s.global_bytes_loaded for s in stats) == 2 * 1000
    assert sum(s.global_bytes_stored for s in stats) == 2 * 1000


def test_packed_registers_hold_halves_low_first():
    vals = np.array([1.5, -2.0, 3.25, 0.0], dtype=np.float32)
    for kind in ("bf16", "f16"):
        bits = half_bits(vals, kind)
        regs = bits[0::2] | (bits[1::2] << np.uint32(16))
        np.testing.assert_array_equal(half_values(regs, kind), vals)
    assert half_bits(np.float32(1.0), "bf16") == 0x3F80 and half_bits(np.float32(1.0), "f16") == 0x3C00


def _swap_rows(layout):
    """A's registers 0 with 1 and 2 with 3 exchanged in every lane: rows g and g + 8 crossed."""
    return dataclasses.replace(layout, coords=tuple((e[2], e[3], e[0], e[1], e[6], e[7], e[4], e[5])
                                                    for e in layout.coords))


def _relowered(c, **layouts):
    tile = c.tile_ir
    kernels = tuple(dataclasses.replace(k, mma=dataclasses.replace(k.mma, **layouts)) if k.mma else k
                    for k in tile.kernels)
    program, _ = run_passes(LOWERING, dataclasses.replace(tile, kernels=kernels), Context(c.target))
    return program


@pytest.mark.parametrize("dtype", HALVES)
def test_planted_wrong_fragment_layout_fails_the_simulator(dtype):
    a, b = _operands(64, 48, 64, dtype, seed=5)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    (ok,) = simulate_program(_relowered(c), env)
    _close_to_exact(torch.from_numpy(ok).to(dtype), a, b, dtype)
    k = c.tile_ir.kernels[0].mma
    want = (a.float() @ b.float()).numpy()
    # A's rows g and g + 8 crossed: the lowering places ldmatrix row addresses by the planted
    # table, the simulated ldmatrix and mma.sync follow PTX's
    (bad,) = simulate_program(_relowered(c, layout_a=_swap_rows(k.layout_a)), env)
    assert np.abs(bad - want).max() > 1.0
    # B's two registers exchanged (k rows 0..7 and 8..15)
    lb = k.layout_b
    (bad_b,) = simulate_program(_relowered(c, layout_b=dataclasses.replace(
        lb, coords=tuple((e[2], e[3], e[0], e[1]) for e in lb.coords))), env)
    assert np.abs(bad_b - want).max() > 1.0


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("dtype", HALVES)
def test_half_mma_cuda_compiles(arch, dtype):
    a, b = _operands(100, 72, 56, dtype)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target=arch)
    assert c.tile_ir.kernels[0].mma is not None
    stats = c.nvcc().stats
    assert all(s.spill_stores == 0 for s in stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_main_loop_is_hmma_fed_by_ldsm():
    a, b = _operands(4096, 4096, 4096, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    kern = c.sass().kernel(c.kernel_ir.kernels[0].name)
    main = kern.main_loop()
    mix = main.mix
    assert mix.hmma > 0 and mix.ldsm > 0 and mix.ffma == 0 and mix.lds == 0
    assert 2 * mix.ldsm <= mix.hmma
    assert mix.ldgsts > 0                   # the operands arrive by cp.async
    assert kern.spill_stores == 0


def test_cost_model_prices_tensor_cores_at_the_targets_rate():
    """The main loop is mma.sync: the work counts its FLOPs as tensor-core FLOPs and the model's
    floor is the target's dense bf16 peak (Target.tensor_tflops), not the FP32 SGEMM rate."""
    from deplokit.target import get_target
    from deplokit.tune.cost_model import compute_floor_us, estimate, roofline_us

    n = 2048
    a, b = _operands(n, n, n, torch.bfloat16)
    h100 = get_target("sm_90")
    assert h100.tensor_rate("bf16") == 989.4 and get_target("sm_80").tensor_rate("bf16") == 312.0
    assert "datasheet" in h100.tensor_sources
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    (k,) = estimate(c.tile_ir, c.kernel_ir, c.target).kernels
    flops = 2 * n ** 3
    assert k.work.tensor_flops == k.work.flops == flops and k.work.tensor_dtype == "bf16"
    # the busiest SM's share: ceil(blocks / 132) blocks at 1 / 132 of the peak
    busiest = 132 * -(-k.work.blocks // 132) / k.work.blocks
    assert compute_floor_us(k.work, h100) == pytest.approx(flops / 989.4e6 * busiest)
    assert roofline_us(k.work, h100) == pytest.approx(flops / 989.4e6)       # the whole GPU's, any grid
    assert k.time_us >= k.sm_us >= flops / 989.4e6
    # the same matmul in float32 (FFMA) is floored at the SGEMM rate: far slower
    f = deplokit.compile(lambda a, b: a @ b, a.float(), b.float(), target="sm_90")
    (kf,) = estimate(f.tile_ir, f.kernel_ir, f.target).kernels
    assert kf.work.tensor_flops == 0 and kf.time_us >= flops / (h100.fp32_tflops * 1e6) > 3 * k.time_us


def test_the_tuner_searches_tensor_cores_against_fma_for_half():
    import random

    from deplokit.tune.space import kernel_spaces

    a, b = _operands(256, 64, 128, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    space = kernel_spaces(c.loop_ir, c.target)[0]
    rng = random.Random(0)
    seen = {dict(space.random_leaf(rng)[1].config)["008_register_tile.mma"] for _ in range(16)}
    assert seen == {"off", "half"}
