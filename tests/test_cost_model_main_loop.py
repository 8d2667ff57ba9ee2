"""The cost model's main loop (tune/sass_model/main_loop.py, tune/cost_model.py): its predicted
instruction mix on Kernel IR, and its ranking of tiles checked against the SASS view."""
from __future__ import annotations

import pytest
import torch

import deplokit
from deplokit.runtime.sass import sass_available
from deplokit.tune.cost_model import CostConstants, estimate, main_loop_time
from deplokit.tune.sass_model.main_loop import main_loop

needs_sass = pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")

BASE = {"005_blockify_launch.thread_shape": "16x16", "008_register_tile.tm": 4, "008_register_tile.tn": 4,
        "008_register_tile.layout": "strided",
        "002_chunk_matmul_k.k_chunk": 16, "011_tma_copy.enable": False, "016_mark_unroll.unroll_k": False,
        "003_split_matmul_k.splits": 1}


def matmul(m=1024, k=1024, n=1024, **knobs):
    config = {**BASE, **{key.replace("__", "."): v for key, v in knobs.items()}}
    return deplokit.compile(torch.matmul, torch.empty(m, k), torch.empty(k, n), config=config)


def the_loop(c):
    func = max(c.kernel_ir.kernels, key=lambda f: len(str(f)))
    return func, main_loop(func)


def test_register_tile_loop_counts():
    _, loop = the_loop(matmul())
    # 16 k steps x 4 x 4 FFMA; A read along k (4 consecutive floats of a row: LDS.128),
    # B's strided slots 16 floats apart: one LDS each, 16 k x 4
    assert (loop.var, loop.ffma, loop.lds, loop.lds64, loop.lds128) == ("a2o", 256, 64, 0, 16)
    assert loop.copies == 2 and loop.barriers >= 2            # two cp.async stages, wait + barrier
    assert loop.shared_loads_per_ffma == pytest.approx(80 / 256)
    assert loop.static > loop.ffma + loop.shared_loads       # bookkeeping and copies cost slots too


def test_rotation_stops_vector_loads_and_conflicts_cost_wavefronts():
    _, plain = the_loop(
        matmul(**{"008_register_tile__layout": "contiguous", "009_permute_register_tile__permute": False})
    )
    _, rotated = the_loop(matmul(**{"008_register_tile__layout": "contiguous"}))
    # contiguous slots: a thread's 4 B values are adjacent and aligned -> LDS.128 ...
    assert (plain.lds, plain.lds128) == (0, 32)
    # ... which 009 leaves alone (banks.py prices them as float4s, conflict-free): rotating
    # them by thread would leave no register map that serves every lane, scalar LDS. It
    # rotates only A's rows (still read along k as LDS.128)
    assert (rotated.lds, rotated.lds128) == (0, 32)
    assert plain.slots_per_ffma == rotated.slots_per_ffma


def test_a_big_register_tile_keeps_its_k_loop():
    # 8x8 per thread x 16 k steps is too big to unroll: the hottest loop is the k loop inside
    _, loop = the_loop(matmul(**{"008_register_tile__tm": 8, "008_register_tile__tn": 8}))
    assert loop.var == "a2i" and loop.passes == 64 * loop.trips // loop.unroll
    assert loop.ffma == 64 * loop.unroll


def test_estimate_sees_the_main_loop_and_ranks_register_tiles():
    times = {}
    for t in (1, 2, 4):
        c = matmul(4096, 4096, 4096, **{"008_register_tile__tm": t, "008_register_tile__tn": t})
        est = estimate(c.tile_ir, c.kernel_ir, c.target)
        k = next(e for e in est.kernels if e.loop is not None)
        assert k.loop_us == k.sm_us > 0 and k.waves >= 1 and 0 < k.tail <= 1 and k.cover > 0
        times[t] = est.time_us
    assert times[4] < times[2] < times[1]
    # no schedule beats the FLOP floor: 2*4096^3 at 67 TFLOP/s
    assert times[4] > 2 * 4096 ** 3 / 67e6


def test_latency_bound_without_prefetch():
    _, loop = the_loop(matmul())
    ahead = main_loop_time(loop, 256, 1, 1, 1.98e9, True)
    waiting = main_loop_time(loop, 256, 1, 1, 1.98e9, False)
    assert waiting.us > ahead.us and waiting.bound == "latency" and waiting.cover == 0
    slow = main_loop_time(loop, 256, 1, 1, 1.98e9, True, CostConstants(latency_cycles=1e6))
    assert slow.bound == "latency" and slow.cover < 1


# register tile, k chunk, TMA: instructions per FFMA in the hottest loop from ~28 to ~1.3 on
# sm_90, each at least 10% from the next, so nvcc's small changes cannot swap two
CONFIGS = [
    {"008_register_tile__tm": 1, "008_register_tile__tn": 1, "011_tma_copy__enable": True},
    {"008_register_tile__tm": 2, "008_register_tile__tn": 2, "011_tma_copy__enable": True},
    {"011_tma_copy__enable": True},
    {"008_register_tile__tm": 1, "008_register_tile__tn": 2},
    {"008_register_tile__tm": 2, "008_register_tile__tn": 4},
    # (a 4x4 tile's k chunk of 8 lands within 5% of the 4x4 TMA one now that TMA is one
    # tensor copy per operand, so the chunk is varied on a 2x4 tile)
    {"002_chunk_matmul_k__k_chunk": 8, "008_register_tile__tm": 2, "008_register_tile__tn": 4},
    {"008_register_tile__tm": 8, "008_register_tile__tn": 4, "016_mark_unroll__unroll_k": True},
]


@needs_sass
def test_model_ranks_tiles_as_the_machine_code_does():
    predicted, static, measured, all_warps = [], [], [], []
    for i, knobs in enumerate(CONFIGS):
        c = matmul(**knobs)
        func, loop = the_loop(c)
        hot = c.sass().kernel(func.name).hottest.mix
        predicted.append(loop.slots_per_ffma)
        static.append(loop.static_per_ffma)
        measured.append(hot.instructions / hot.ffma)
        if not knobs.get("011_tma_copy__enable"):
            all_warps.append(i)
        assert (loop.lds, loop.lds64, loop.lds128) == (hot.lds, hot.lds64, hot.lds128)
        assert loop.static == pytest.approx(hot.instructions, rel=0.25)

    def order(xs):
        return sorted(range(len(xs)), key=xs.__getitem__)
    # the machine code's FFMA share, instruction for instruction ...
    assert order(static) == order(measured)
    # ... and the issue slots per FFMA where every warp runs the same code (one thread issues
    # the TMA copies: the model counts them for one warp of the block, the listing for all)
    assert order([predicted[i] for i in all_warps]) == order([measured[i] for i in all_warps])


def test_a_partial_last_wave_costs_a_whole_one():
    import dataclasses

    from deplokit.tune.cost_model import kernel_time, occupancy
    c = matmul(4096, 4096, 4096)
    func, loop = the_loop(c)
    est = next(k for k in estimate(c.tile_ir, c.kernel_ir, c.target).kernels if k.loop is not None)
    per_sm, _ = occupancy(c.target, est.work.threads, est.registers, est.smem_bytes)
    full = c.target.sm_count * per_sm
    times = {}
    for blocks in (full, full + 1):
        work = dataclasses.replace(est.work, blocks=blocks)
        times[blocks] = kernel_time(work, c.target, est.registers, est.smem_bytes, 0, loop=loop)
    one, two = times[full], times[full + 1]
    assert (one.waves, two.waves) == (1, 2) and one.tail == 1.0 and two.tail < 0.51
    assert two.loop_us == pytest.approx(2 * one.loop_us)


def test_compiled_index_matches_the_closure_tree():
    # compile_int turns an index into one Python function; closure_int walks the tree: same ints
    import itertools

    from deplokit.ir import kernel_ir as K
    from deplokit.tune.sass_model.loop_addresses import INT_OPS, closure_int, compile_int
    leaves = [K.Const(7), K.Const(-3), K.Var("i"), K.Special("tid.x"), K.Var("unset")]
    exprs = [K.Binary(op, a, b) for op in sorted(INT_OPS) for a, b in itertools.product(leaves, repeat=2)]
    exprs += [K.Unary("neg", exprs[5]), K.Unary("not", exprs[9]), K.Select(exprs[3], exprs[11], exprs[40])]
    deep = K.Var("i")
    for n in range(400):                        # past the parser's nesting limit: the closure tree
        deep = K.Binary("+", deep, K.Const(n))
    exprs.append(deep)
    for env in ({"i": 5, "tid.x": 2}, {"i": -9, "tid.x": 0}, {"i": 0, "tid.x": 31}):
        for e in exprs:
            assert _outcome(compile_int(e), env) == _outcome(closure_int(e), env), e


def _outcome(fn, env):
    try:
        return fn(env)
    except ValueError as err:       # a negative shift count, either way
        return type(err)


def test_a_staged_prologue_copy_is_not_the_main_loop():
    # down(silu(g) * u) with the prologue applied while staging (007): the staging copy is a
    # rolled loop with float work nested in the K loop; it was taken for the main loop and the
    # whole K step charged per copy (Qwen's down_proj at 9,541 us against 363 for gate/up)
    g, u, w = torch.randn(1, 128, 4096), torch.randn(1, 128, 4096), torch.randn(1024, 4096)
    fused = deplokit.compile(lambda g, u, w: (torch.nn.functional.silu(g) * u) @ w.t(), g, u, w, target="sm_90")
    func = fused.kernel_ir.kernels[0]
    assert "applied while staging" in " ".join(str(r) for st in fused.trace for r in st.remarks)
    loop = main_loop(func)
    assert loop.ffma > 0 and loop.trips > 1
    plain = deplokit.compile(lambda a, w: a @ w.t(), g, w, target="sm_90")
    us = [estimate(c.tile_ir, c.kernel_ir, c.target).kernels[0].time_us for c in (fused, plain)]
    assert us[0] < 1.5 * us[1], us
