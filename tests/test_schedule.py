"""Tile IR: the scheduling passes in order, their effect on the seeds' kernels, and that every
program still matches torch after every pass (check_passes) and on the simulator."""
import pytest
import torch
import torch.nn as nn
from programs import config_of, corpus

import deplokit
from deplokit.ir.tile_ir import BLOCK, THREAD, Combine, Stage, StridedLoop, walk
from deplokit.passes.schedule import SCHEDULE

PROGRAMS = corpus()


def tile_steps(c):
    return [s for s in c.trace if s.stage == "tile"]


def test_the_scheduling_passes_in_order():
    labels = [m.name for m in SCHEDULE]
    assert labels == ["001_tileify", "002_chunk_matmul_k", "003_split_matmul_k", "004_cooperative_reduce",
                      "005_blockify_launch", "006_chunk_reduce", "007_stage_inputs", "008_register_tile",
                      "009_permute_register_tile", "010_double_buffer", "011_tma_copy",
                      "012_swizzle_smem", "013_async_copy", "014_pad_smem", "015_pipeline_k_outer",
                      "016_mark_unroll"]
    for m in SCHEDULE:
        assert m.description and callable(m.apply) and m.stage == "tile"
        for knob in m.knobs:
            assert knob.domain and knob.name


def test_rms_norm_tile_ir_golden():
    c = deplokit.compile(nn.RMSNorm(2048, eps=1e-6), torch.randn(1, 32, 2048))
    assert str(c.tile_ir) == """\
=== merged_rms_norm -> rms_norm ===
Tile(axes=(a3:256=THREAD, a0:32=BLOCK)):
    x_smem = AsyncStage(x, origin=(0, a0, 0), slab=(a1:2048@2))
    AsyncWait(x_smem)
    StridedLoop(a1 = a3 * 4; < 2048; += 1024):  # reduce unroll
        for a1v in 0..4:  # vector
            in0 = load x_smem[a1 + a1v]
            v0 = multiply(in0, in0)
            acc0 <- add(acc0, v0)
    Combine(acc0, add, over=(a3,))
    v1 = divide(acc0, 2048)
    v2 = add(v1, 1e-06)
    v3 = rsqrt(v2)
    StridedLoop(a2 = a3 * 4; < 2048; += 1024):  # free unroll
        for a2v in 0..4:  # vector
            in1 = load x_smem[a2 + a2v]
            in2 = load p_weight[a2 + a2v]  # float4
            v4 = multiply(in1, v3)
            v5 = multiply(v4, in2)
            rms_norm[0, a0, a2 + a2v] = v5  # float4"""


def test_every_pass_is_traced_with_params_or_reason():
    c = deplokit.compile(nn.RMSNorm(2048), torch.randn(1, 32, 2048))
    steps = tile_steps(c)
    assert [s.name for s in steps] == [m.name for m in SCHEDULE]
    changed = {s.name for s in steps if s.changed}
    assert {"001_tileify", "004_cooperative_reduce", "005_blockify_launch", "007_stage_inputs",
            "016_mark_unroll"} <= changed
    for s in steps:
        assert s.changed or s.skipped_reason.startswith("merged_rms_norm: ")
    lanes = dict(dict(steps[3].params)["merged_rms_norm"])["lanes"]
    assert lanes == 256


def test_knob_override_changes_the_schedule():
    c = deplokit.compile(nn.RMSNorm(2048), torch.randn(1, 32, 2048), config={"004_cooperative_reduce.lanes": 64})
    tile = c.tile_ir.kernels[0].tile()
    assert [a.extent for a in tile.axes if a.kind == THREAD] == [64]
    assert c.check(backend="sim").ok
    with pytest.raises(deplokit.DeplokitError, match="outside its domain"):
        deplokit.compile(nn.RMSNorm(64), torch.randn(2, 64), config={"004_cooperative_reduce.lanes": 100})


def test_softmax_stages_its_row_once_and_combines_twice():
    c = deplokit.compile(nn.Softmax(dim=-1), torch.randn(3, 5, 1000))
    body = c.tile_ir.kernels[0].tile().body
    stages = [s for s in body if isinstance(s, Stage)]
    combines = [s for s, _ in walk(body) if isinstance(s, Combine)]
    assert [s.tensor for s in stages] == ["input"]
    assert [(s.reduction) for s in combines] == ["max", "sum"]


def test_pointwise_rounds_up_to_whole_blocks_and_masks():
    fn, inputs = PROGRAMS["pointwise_1000"]
    c = deplokit.compile(fn, *inputs, config={"005_blockify_launch.vector_width": 1})   # one element a thread
    tile = c.tile_ir.kernels[0].tile()
    assert [(a.extent, a.kind) for a in tile.axes] == [(256, THREAD), (4, BLOCK)]
    assert "if " in str(c.kernel_ir)          # the store past 1000 is masked
    assert c.check(backend="sim").ok


def test_matmul_gets_a_16x16_thread_block():
    fn, inputs = PROGRAMS["matmul_odd"]
    c = deplokit.compile(fn, *inputs, config={"005_blockify_launch.thread_shape": "16x16"})
    tile = c.tile_ir.kernels[0].tile()
    # the article's block (005's thread_shape 16x16): M = 37: 16 threads x 2 register rows
    # (008) per block, 2 blocks; split-K 2 fills more SMs (003); the thread block stays 16 x 13
    assert sorted((a.role, a.kind, a.extent) for a in tile.axes) == [
        ("K", BLOCK, 2), ("M", BLOCK, 2), ("M", THREAD, 16), ("N", THREAD, 13)]
    assert c.check(backend="sim").ok


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_simulator_matches_torch(name):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, config=config_of(PROGRAMS[name]))
    result = c.check(backend="sim", atol=1e-4 if name.startswith("llama") else 1e-5)
    assert result.ok, result


@pytest.mark.parametrize("name", ["rms_norm_seed", "softmax_odd", "relu_matmul_seed", "layer_norm_two_axes",
                                  "cat_slices", "embedding", "matmul_ragged_n", "linear_k_tail"])
def test_check_passes_after_every_pass(name):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs)
    checks = c.check_passes()
    assert [p.name for p in checks] == [m.name for m in SCHEDULE]
    bad = [str(p) for p in checks if not p.result.ok]
    assert not bad, bad


def test_cooperative_kernels_stride_every_phase():
    fn, inputs = PROGRAMS["layer_norm_two_axes"]
    c = deplokit.compile(fn, *inputs)
    body = c.tile_ir.kernels[0].tile().body
    loops = [s for s in body if isinstance(s, StridedLoop)]
    # the reduction over (7, 37) is flattened into one strided loop of 259 elements
    assert loops and all(lp.stop == 259 for lp in loops)


def test_long_rows_are_chunked_so_their_head_fits_in_shared_memory():
    x = torch.randn(3, 16391)
    # three rows: split_reduce would spread them over blocks; this is about one block's row
    c = deplokit.compile(nn.Softmax(dim=-1), x, config={"split_reduce.splits": 1})
    step = next(s for s in c.trace if s.name == "006_chunk_reduce")
    assert step.changed
    body = c.tile_ir.kernels[0].tile().body
    loops = [s for s in body if isinstance(s, StridedLoop)]
    heads, tails = loops[0::2], loops[1::2]
    assert len(loops) == 6 and {lp.stop for lp in heads} == {heads[0].stop} and {lp.stop for lp in tails} == {16391}
    (stage,) = [s for s in body if isinstance(s, Stage)]
    assert stage.slab[0].extent == heads[0].stop and 4 * stage.size <= 48 * 1024
    assert all(p.result.ok for p in c.check_passes())
    from deplokit.runtime.nvcc import nvcc_available
    if nvcc_available():
        found = c.nvcc()
        assert found.stats[c.kernel_ir.kernels[0].name].smem_bytes <= 48 * 1024
        assert c.kernel_ir.kernels[0].smem_bytes is None      # the compilation is left as it was


def test_rows_that_fit_are_not_chunked():
    c = deplokit.compile(nn.Softmax(dim=-1), torch.randn(3, 1000))
    step = next(s for s in c.trace if s.name == "006_chunk_reduce")
    assert not step.changed and "fit in shared memory whole" in step.skipped_reason
