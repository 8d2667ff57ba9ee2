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
                         config={"003_split_matmul_k.splits": 8})
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
