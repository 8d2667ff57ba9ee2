"""Issue 26 part 1: stream-K where tiles and splits leave the SMs unevenly loaded. 003 deals
the grid's tiles x K chunks to as many workers as the SMs hold evenly (grid_plan.stream_k_plan)
where it prices cheaper than the grid (grid_plan.stream_k_price); the lowering rewrites the
scheduled split kernel into the dealt loop (passes/split/stream_k.py), the analyses count the
same plan (ir/stream_k.py), and a tile's segments are added in segment order by the last to
arrive: bit-identical whichever block runs first."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.analysis.occupancy import balanced, sm_balance
from deplokit.ir import kernel_ir as K
from deplokit.ir.stream_k import StreamKPlan, dealt, fitted
from deplokit.passes.schedule.grid_plan import stream_k_plan
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sim import simulate_kernel, simulate_program
from deplokit.target import get_target
from deplokit.tune.cost_model import estimate

REDUCE, SPLITS = "003_split_matmul_k.reduce", "003_split_matmul_k.splits"


def _linear(m, n, k, dtype, target, config=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(1, m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
    c = deplokit.compile(lambda x, w: F.linear(x, w), x, w, target=target, config=config or {})
    return c, {"x": x.float().numpy(), "w": w.float().numpy()}, F.linear(x, w).float().numpy()


def _remarks(c, name):
    return [r for st in c.trace if st.name == name for r in st.remarks]


def test_the_plan_deals_every_iteration_once_in_runs_that_differ_by_one():
    for tiles, chunks, workers in [(112, 40, 264), (42, 29, 132), (7, 5, 4), (32, 6, 5), (1, 33, 3)]:
        p = StreamKPlan(tiles, chunks, workers)
        runs = [p.start(w + 1) - p.start(w) for w in range(workers)]
        assert sum(runs) == tiles * chunks and set(runs) <= {p.run, p.run + 1}
        assert p.trips == max(runs)          # every worker runs as many: the shorter ones one dropped
        for w in range(workers):
            assert all(p.owner(g) == w for g in range(p.start(w), p.start(w + 1)))
        for t in range(tiles):               # a tile's segments: the workers its chunks fall to
            assert p.segments(t) == len({p.owner(g) for g in range(t * chunks, (t + 1) * chunks)})
        assert p.slots == max(p.segments(t) for t in range(tiles))


def test_the_plan_takes_as_many_workers_an_sm_as_the_grid_had_blocks():
    # 112 tiles x 2 splits = 224 blocks on 132 SMs (SM balance 0.85): 2 workers an SM, 1.00
    p = stream_k_plan(112, 40, 132, 224)
    assert p.workers == 264 and sm_balance(p.workers, 132) == 1.0 and (p.run, p.trips) == (16, 17)
    # 16 tiles x 14 chunks are 1.7 an SM: under a ring's worth, latency-bound on any schedule
    assert stream_k_plan(16, 14, 132, 32) is None
    # 1000 tiles x 4096 chunks on 1056 workers: the owner's arithmetic would pass 32-bit ints
    assert not StreamKPlan(1000, 4096, 1056).fits_int32 and stream_k_plan(1000, 4096, 132, 1000) is None
    # the scheduled tiles cut into more segments than 003's workspace holds: fewer workers
    p = fitted(16, 128, 264, 8)
    assert p.slots <= 8 < StreamKPlan(16, 128, p.workers + 1).slots


def test_an_fp32_projection_its_grid_leaves_unbalanced_is_dealt_to_stream_k():
    # 112 tiles of 64 x 128 over 40 K chunks: 2 splits are 224 blocks (SM balance 0.85), and
    # a balanced grid of tiles and splits prices 1.27x; stream-K deals them to 264 workers
    c, _, _ = _linear(119, 7168, 640, torch.float32, "sm_90")
    (tile,) = c.tile_ir.kernels
    assert tile.split_k.stream_k and tile.split_k.workers == 264
    (f,) = c.kernel_ir.kernels
    assert f.grid == (264, 1, 1) and balanced(264, 132)
    said = " ".join(_remarks(c, "003_split_matmul_k"))
    assert "SM balance 0.85" in said and "stream-K: 264 workers deal 112 tiles x 40 K chunks, 16 or 17 each" in said
    assert any("264 workers deal 112 tiles" in r for r in _remarks(c, "001_materialize"))
    # the Kernel IR: one K loop of 17 iterations, each ending in a flush of the segment
    loop = next(s for s in K.walk_stmts(f.body) if isinstance(s, K.For) and s.var == "a2o")
    assert loop.stop == K.Const(17, "int")
    assert "atomic_inc global merged_linear_arrivals[" in str(c.kernel_ir)
    # the cost model counts the workers, a flush's round trips for each tile a worker crosses,
    # and prices it under the split grid it replaces
    (est,) = estimate(c.tile_ir, c.kernel_ir, c.target).kernels
    assert est.work.blocks == 264 and est.work.tail_round_trips == 6
    split, _, _ = _linear(119, 7168, 640, torch.float32, "sm_90", {REDUCE: "in_kernel"})
    (kept,) = estimate(split.tile_ir, split.kernel_ir, split.target).kernels
    assert kept.work.blocks == 224 and est.time_us < kept.time_us


def test_a_memory_bound_half_grid_keeps_its_blocks_and_says_why():
    # bf16 on wgmma, 72 tiles over K 1984: HBM bounds the grid, not its busiest SM, so
    # stream-K's partials would only add bytes
    c, _, _ = _linear(76, 4608, 1984, torch.bfloat16, "sm_90")
    assert not any(t.split_k is not None and t.split_k.stream_k for t in c.tile_ir.kernels)
    said = " ".join(_remarks(c, "003_split_matmul_k"))
    assert "no stream-K: it prices" in said and "not the busiest SM, bound the grid" in said


# (target, dtype, M, N, K, SMs): a K loop on wgmma whose 5 workers cross 7 or 8 tiles of 6
# chunks each, 38 or 39 iterations (one dropped); a row tail (200 = 3 x 64 + 8); mma.sync with
# ldmatrix; FFMA off TMA boxes; FFMA off cp.async; on a target of a few SMs, so that stream-K
# has few tiles to deal and the simulator little to run
DEALT = [
    ("sm_90", torch.bfloat16, 128, 256, 384, 5),
    ("sm_90", torch.bfloat16, 200, 256, 128, 3),
    ("sm_80", torch.bfloat16, 96, 256, 512, 3),
    ("sm_90", torch.float32, 64, 160, 256, 3),
    ("sm_80", torch.float32, 32, 96, 384, 2),
]


@pytest.mark.parametrize("arch,dtype,m,n,k,sms", DEALT)
def test_stream_k_matches_eager_bit_for_bit_whichever_block_arrives_last(arch, dtype, m, n, k, sms):
    target = dataclasses.replace(get_target(arch), sm_count=sms)
    c, env, expected = _linear(m, n, k, dtype, target, {REDUCE: "stream_k", SPLITS: 1})
    (tile,) = c.tile_ir.kernels
    plan = dealt(tile)
    (f,) = c.kernel_ir.kernels
    assert f.grid == (plan.workers, 1, 1)
    # blocks first to last or last to first, one at a time or all at once: another worker adds
    # each tile's segments, in the same order
    outs = [simulate_program(c.kernel_ir, env, block_order=order, max_threads_in_flight=flight)[0]
            for order in ("forward", "reversed") for flight in (f.threads, 1 << 20)]
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    np.testing.assert_allclose(outs[0].astype(np.float32), expected, rtol=tol, atol=tol * 10)
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])


def test_a_worker_crosses_tiles_and_the_counters_are_zero_after_the_launch():
    target = dataclasses.replace(get_target("sm_90"), sm_count=5)
    c, env, expected = _linear(128, 256, 384, torch.bfloat16, target, {REDUCE: "stream_k", SPLITS: 1})
    plan = dealt(c.tile_ir.kernels[0])
    assert plan.trips > plan.chunks and plan.iterations % plan.workers      # crosses tiles, runs uneven
    (f,) = c.kernel_ir.kernels
    types = {b.name: b.type for b in tuple(c.kernel_ir.buffers) + tuple(c.kernel_ir.written)}
    # the simulator holds bfloat16 values as float32; the workspace starts as NaN
    bufs = {p.name: (env[p.name].reshape(-1).copy() if p.name in env else
                     np.zeros(types[p.name].numel, dtype=np.int32) if p.ctype == "int32" else
                     np.full(types[p.name].numel, np.nan, dtype=np.float32)) for p in f.params}
    out = next(p.name for p in f.params if not p.const and p.ctype != "int32" and "partials" not in p.name)
    counter = next(p.name for p in f.params if p.ctype == "int32")
    for order in ("forward", "reversed"):        # a second launch on the same memory: a graph's replay
        simulate_kernel(f, bufs, block_order=order, max_threads_in_flight=f.threads)
        assert not bufs[counter].any()
        np.testing.assert_allclose(bufs[out].reshape(expected.shape), expected, rtol=1e-2, atol=0.1)


def test_an_mma_tile_counts_each_block_in_once():
    # 008's mma epilogue ran every statement after the K loop once per C element, the split's
    # arrival too: 32 arrivals a block, and the tile's 32nd could come before its last block had
    # stored its partials (blocks one at a time: 170 off); the arrival now stands between nests
    c, env, expected = _linear(64, 256, 2048, torch.bfloat16, "sm_80", {REDUCE: "in_kernel"})
    (tile,) = c.tile_ir.kernels
    assert tile.mma is not None and tile.split_k.in_kernel and not tile.split_k.stream_k
    assert any(type(s).__name__ == "SplitArrive" for s in tile.tile().body)
    (f,) = c.kernel_ir.kernels
    out = simulate_program(c.kernel_ir, env, max_threads_in_flight=f.threads)[0]
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=1e-2, atol=0.5)


def test_a_forced_stream_k_says_why_it_cannot_deal():
    # 8 tiles x 14 K chunks on 132 SMs: under a ring's chunks a worker
    c, _, _ = _linear(64, 128, 896, torch.bfloat16, "sm_90", {REDUCE: "stream_k", SPLITS: 2})
    assert not c.tile_ir.kernels[0].split_k.stream_k
    assert any("no stream-K: " in r and "under 4 an SM" in r for r in _remarks(c, "003_split_matmul_k"))


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
@pytest.mark.parametrize("arch,dtype,config", [
    ("sm_90", torch.float32, {}),                                  # dealt by default, FFMA off TMA
    ("sm_90", torch.bfloat16, {REDUCE: "stream_k"}),               # wgmma
    ("sm_80", torch.bfloat16, {REDUCE: "stream_k"}),               # mma.sync, cp.async
    ("sm_120", torch.float32, {REDUCE: "stream_k"}),
])
def test_nvcc_compiles_the_dealt_kernel_without_spills(arch, dtype, config):
    c, _, _ = _linear(119, 7168, 640, dtype, arch, config)
    assert c.tile_ir.kernels[0].split_k.stream_k
    name = c.kernel_ir.kernels[0].name
    stats = compile_cuda(str(c.cuda), c.cuda.build_arch(arch), kernel_names=c.cuda.kernels).stats
    assert stats[name].spills == 0


@pytest.mark.parametrize("arch,dtype,sms", [("sm_90", torch.float32, 4), ("sm_120", torch.bfloat16, 3)])
def test_the_epilogue_reads_its_operands_at_the_segments_tile(arch, dtype, sms):
    # the bias was staged once before the K loop at the block's tile; a worker's tile changes
    # along its run, so the flush reads the bias (and the residual) at the segment's tile
    target = dataclasses.replace(get_target(arch), sm_count=sms)
    g = torch.Generator().manual_seed(3)
    x, w, b, r = (torch.randn(1, 48, 384, generator=g).to(dtype), torch.randn(160, 384, generator=g).to(dtype),
                  torch.randn(160, generator=g).to(dtype), torch.randn(1, 48, 160, generator=g).to(dtype))

    def f(x, w, b, r):
        return F.gelu(F.linear(x, w, b) + r)

    c = deplokit.compile(f, x, w, b, r, target=target, config={REDUCE: "stream_k", SPLITS: 2})
    (tile,) = c.tile_ir.kernels
    assert any(type(s).__name__ == "Stage" and s.tensor == "b" for s in tile.tile().body)   # before dealing
    plan = dealt(tile)
    assert plan.slots >= 2 and c.kernel_ir.kernels[0].grid == (plan.workers, 1, 1)
    assert "b_smem" not in str(c.kernel_ir)
    assert c.check(backend="sim").passed


def test_every_pass_of_a_stream_k_kernel_runs_against_eager():
    # the lowering deals whatever Tile IR it is given: after 003 the grid is one tile's K
    # dealt to the workers, after 005 and 008 the scheduled tiles
    target = dataclasses.replace(get_target("sm_90"), sm_count=3)
    c, _, _ = _linear(64, 160, 256, torch.float32, target, {REDUCE: "stream_k", SPLITS: 2})
    assert c.tile_ir.kernels[0].split_k.stream_k
    checks = c.check_passes()
    assert len(checks) == 16 and all(chk.result.ok for chk in checks)
