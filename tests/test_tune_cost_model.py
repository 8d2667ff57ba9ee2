"""The analytic cost model (deplokit/tune/cost_model.py) and the work it prices (traffic.py)."""
import dataclasses

import pytest
import torch
from tune_programs import compiled

import deplokit
from deplokit.analysis.work import count_work
from deplokit.passes.lower.materialize import materialize
from deplokit.target import get_target
from deplokit.tune.calibrate import Sample, fit_constants, log_error, predict
from deplokit.tune.cost_model import CostConstants, DoesNotFit, estimate, kernel_time, occupancy, roofline_us

H100 = get_target("sm_90")


def _work(c, i=0):
    k = c.tile_ir.kernels[i]
    return count_work(k, c.tile_ir.types())


def test_rms_norm_moves_its_compulsory_bytes_once():
    c = compiled("rms_norm")
    w = _work(c)
    assert w.compulsory_bytes == 4 * (2 * 32 * 2048 + 2048)
    assert w.threads * w.blocks >= 32 * 32
    assert w.coalescing > 0.9            # rows read and written by consecutive threads
    assert w.flops >= 3 * 32 * 2048      # square, accumulate, scale per element


def test_a_transposed_read_costs_more_sectors_than_a_straight_one():
    x = torch.randn(64, 64)
    straight = _work(deplokit.compile(lambda x: x * 2.0, x, config={"007_stage_inputs.stage": False}))
    transposed = _work(deplokit.compile(lambda x: x.t() * 2.0, x, config={"007_stage_inputs.stage": False}))
    assert straight.requested_bytes == transposed.requested_bytes
    assert transposed.sector_bytes > 2 * straight.sector_bytes
    assert transposed.coalescing < 0.6 < straight.coalescing


def test_padding_a_conflicting_stage_removes_wavefronts():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=g), torch.randn(64, 256, generator=g)
    cfg = {"008_register_tile.layout": "contiguous", "009_permute_register_tile.permute": False}
    # neither padded (014) nor swizzled (012, which would fix A's 2-way conflict on sm_90)
    conflicted = _work(deplokit.compile(lambda a, b: a @ b, a, b,
                                        config={**cfg, "014_pad_smem.pad": 0, "012_swizzle_smem.enable": False}))
    permuted = _work(deplokit.compile(lambda a, b: a @ b, a, b,
                                      config={**cfg, "009_permute_register_tile.permute": True}))
    assert permuted.smem_wavefronts < conflicted.smem_wavefronts
    assert permuted.flops == conflicted.flops


def test_occupancy_follows_registers_shared_memory_and_threads():
    blocks, occ = occupancy(H100, 256, 32, 0)
    assert (blocks, occ) == (8, 1.0)
    assert occupancy(H100, 256, 128, 0)[1] == 0.25           # 128 regs: 2 blocks of 8 warps
    assert occupancy(H100, 256, 32, 100 * 1024)[0] == 2      # two 100 KB blocks per SM
    with pytest.raises(DoesNotFit):
        occupancy(H100, 1024, 255, 0)


def test_predictions_respect_the_roofline_and_register_pressure():
    w = _work(deplokit.compile(lambda x: torch.sigmoid(x) * 2.0, torch.randn(1 << 20)))
    assert w.blocks > 1000
    low = kernel_time(w, H100, 32, 0)
    high = kernel_time(w, H100, 255, 0)
    assert low.time_us >= roofline_us(w, H100) > 0
    assert high.occupancy < low.occupancy
    assert high.time_us > low.time_us
    assert low.bound == "dram"                   # a pointwise stream is memory bound


def test_estimate_covers_every_kernel_the_schedule_materialises():
    g = torch.Generator().manual_seed(0)
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(4, 2048, generator=g), torch.randn(2048, 64, generator=g),
                         config={"003_split_matmul_k.splits": 8, "003_split_matmul_k.reduce": "reducer"})
    kp = materialize(c.tile_ir)
    e = estimate(c.tile_ir, kp, c.target)
    assert [k.name for k in e.kernels] == [k.name for k in kp.kernels]
    assert len(e.kernels) == 2                   # the split matmul, then its reducer
    assert e.time_us == pytest.approx(sum(k.time_us for k in e.kernels))


def test_calibration_recovers_constants_from_measurements_they_produced():
    works = []
    for name in ("rms_norm", "rms_norm_odd", "softmax", "matmul_odd"):
        c = compiled(name)
        if name == "matmul_odd":        # one output per thread: the works this fit was tuned on
            c = c.recompile({"008_register_tile.tm": 1, "005_blockify_launch.thread_shape": "16x16"})
        works.append(_work(c))
    truth = dataclasses.replace(CostConstants(), launch_us=5.0, l2_bandwidth_ratio=1.5, mem_occupancy=0.6)
    samples = [Sample(w, regs, 0, 0, predict(Sample(w, regs, 0, 0, 1.0), H100, truth))
               for w in works for regs in (32, 64, 128)]
    before = log_error(samples, H100, CostConstants())
    fitted, after = fit_constants(samples, H100)
    assert before > 0.01
    assert after < before / 10
    assert fitted.launch_us == pytest.approx(5.0, rel=0.2)


def test_the_model_objective_prices_every_kernel_split_k_reducer_included():
    from deplokit.tune.objective import ModelObjective
    from deplokit.tune.space import kernel_spaces
    g = torch.Generator().manual_seed(0)
    reducer = {"003_split_matmul_k.reduce": "reducer"}
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(32, 2048, generator=g), torch.randn(2048, 256, generator=g),
                         config=reducer)
    assert [k.name for k in c.kernel_ir.kernels] == ["merged_matmul", "merged_matmul_reduce"]
    whole = estimate(c.tile_ir, c.kernel_ir, c.target)
    space = kernel_spaces(c.loop_ir, c.target, start=reducer)[0]
    leaf = space.default_leaf()
    program = space.program_with(leaf)
    assert [k.name for k in program.kernels] == ["merged_matmul", "merged_matmul_reduce"]
    # the trial is what the compiled program costs: the split kernel and its reducer
    assert ModelObjective(c.target, ptxas=False)(space, leaf) == pytest.approx(whole.time_us)
    assert whole.time_us > whole.kernels[0].time_us + CostConstants().launch_us


def test_target_data_is_what_a_part_sustains_with_its_sources():
    for t in map(get_target, ("sm_80", "sm_90", "sm_120")):
        boost = t.peak_fp32_tflops * 1e12 / (t.sm_count * t.fp32_lanes_per_sm * 2)
        assert t.clock_hz <= boost * 1.001
        assert t.bandwidth_gbs < t.peak_bandwidth_gbs
        assert t.fp32_tflops <= t.sm_count * t.fp32_lanes_per_sm * 2 * t.clock_hz / 1e12 * 1.001
        assert t.sources
    assert H100.clock_hz == 1.755e9 and H100.fp32_tflops == 51.6


def test_few_warps_issue_at_their_own_rate_not_an_occupancy_fraction():
    # one issue-bound grid of blocks of 1, 2, 4 and 8 warps, one block per SM: an SM issues
    # warps x warp_issue instructions a clock until its 4 schedulers are full
    w = _work(deplokit.compile(lambda x: torch.sigmoid(x) * 2.0, torch.randn(1 << 20)))
    base = dataclasses.replace(w, blocks=H100.sm_count, instructions=1e9, fp_instructions=0.0, flops=0.0,
                               compulsory_bytes=1024, requested_bytes=1024, sector_bytes=1024, smem_wavefronts=0)
    sm = {warps: kernel_time(dataclasses.replace(base, threads=32 * warps), H100, 32, 0).sm_us
          for warps in (1, 2, 4, 8, 16)}
    rate = CostConstants().warp_issue
    assert sm[1] == pytest.approx(1e9 / (rate * H100.sm_count * H100.clock_hz) * 1e6)
    assert sm[1] / sm[2] == pytest.approx(2.0) and sm[2] / sm[4] == pytest.approx(2.0)
    assert sm[8] == pytest.approx(sm[16])        # 8 warps fill the schedulers


def test_a_grid_runs_as_long_as_its_busiest_sm():
    # the same issue-bound work in 132 blocks (one an SM) and in 148 (16 SMs run two): the
    # grid lasts as long as the SMs with two blocks, 2 of 148 shares of the work, not 1 of 132
    w = _work(deplokit.compile(lambda x: torch.sigmoid(x) * 2.0, torch.randn(1 << 20)))
    base = dataclasses.replace(w, threads=32 * 16, instructions=1e9, fp_instructions=0.0, flops=0.0,
                               compulsory_bytes=1024, requested_bytes=1024, sector_bytes=1024, smem_wavefronts=0)
    sms = H100.sm_count
    even = kernel_time(dataclasses.replace(base, blocks=sms), H100, 32, 0).sm_us
    tail = kernel_time(dataclasses.replace(base, blocks=sms + 16), H100, 32, 0).sm_us
    many = kernel_time(dataclasses.replace(base, blocks=sms * 64), H100, 32, 0).sm_us
    assert tail / even == pytest.approx(2 * sms / (sms + 16))
    assert many == pytest.approx(even)          # 64 blocks on every SM: evenly loaded again


def test_the_compute_floor_is_the_busiest_sms_share_at_its_rate():
    # 38 blocks of one half matmul use 38 of 132 SMs' tensor cores: the floor is a block's
    # FLOPs at 1 / 132 of the peak, 132 / 38 times the whole GPU's; 264 blocks, the GPU's
    from deplokit.tune.cost_model import compute_floor_us
    w = _work(deplokit.compile(lambda x: torch.sigmoid(x) * 2.0, torch.randn(1 << 20)))
    mm = dataclasses.replace(w, flops=1e9, tensor_flops=1e9, tensor_dtype="bf16")
    whole = 1e9 / (H100.tensor_rate("bf16") * 1e6)
    sms = H100.sm_count
    assert compute_floor_us(dataclasses.replace(mm, blocks=2 * sms), H100) == pytest.approx(whole)
    assert compute_floor_us(dataclasses.replace(mm, blocks=38), H100) == pytest.approx(whole * sms / 38)
    tail = compute_floor_us(dataclasses.replace(mm, blocks=sms + 16), H100)
    assert tail == pytest.approx(whole * 2 * sms / (sms + 16))
