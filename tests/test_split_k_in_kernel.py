"""Issue 26 part 2: split-K reduced inside the GEMM. Each split block stores its partial, counts
itself in on its tile's integer counter, and the tile's last block adds the partials in split
order, applies the epilogue and resets the counter; 003 chooses it (`reduce=in_kernel`) where
grid_plan.reduce_choice prices it under a reducer kernel, and the cost model prices the tail."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import deplokit
from deplokit.bench.suite import suite_entries
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_split import ThreadFence
from deplokit.passes.schedule.grid_plan import reduce_choice
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sim import SimulationError, simulate_kernel, simulate_program
from deplokit.target import get_target
from deplokit.tune.cost_model import CostConstants, estimate

H100 = get_target("sm_90")
REDUCE = "003_split_matmul_k.reduce"


def _residual_projection(reduce=None):
    # M = 32 tokens, a residual epilogue: 003 splits K 16 ways over 16 tiles (256 blocks)
    g = torch.Generator().manual_seed(0)
    x, w, r = (torch.randn(1, 32, 512, generator=g), torch.randn(512, 64, generator=g),
               torch.randn(1, 32, 64, generator=g))
    config = {REDUCE: reduce} if reduce else {}
    c = deplokit.compile(lambda x, w, r: x @ w + r, x, w, r, target="sm_90", config=config)
    return c, {"x": x.numpy(), "w": w.numpy(), "r": r.numpy()}, (x @ w + r).numpy()


@pytest.fixture(scope="module")
def projection():
    return _residual_projection()


def test_the_last_block_reduces_in_split_order_whichever_block_arrives_last(projection):
    c, env, expected = projection
    (tile,) = c.tile_ir.kernels
    assert tile.split_k.in_kernel and tile.split_k.splits == 16       # chosen by cost, not by the knob
    (func,) = c.kernel_ir.kernels
    step = next(s for s in c.trace if s.name == "003_split_matmul_k")
    assert "in the kernel: the last of 16 blocks per tile adds the partials in split order" in step.decisions[0].note
    # blocks arrive first to last, or last to first, in chunks of 64 blocks or all at once:
    # a different block adds each tile's partials, the float sum is the same, bit for bit
    outs = [simulate_program(c.kernel_ir, env, block_order=order, max_threads_in_flight=flight)[0]
            for order in ("forward", "reversed") for flight in (64 * func.threads, 1 << 20)]
    np.testing.assert_allclose(outs[0], expected, rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])
    # ... and the same bits as a reducer kernel's, which adds them in the same order
    red, _, _ = _residual_projection("reducer")
    assert len(red.kernel_ir.kernels) == 2
    assert np.array_equal(simulate_program(red.kernel_ir, env)[0], outs[0])


def test_the_counters_are_zero_after_every_launch_so_a_graph_replays(projection):
    c, env, expected = projection
    (func,) = c.kernel_ir.kernels
    types = {b.name: b.type for b in tuple(c.kernel_ir.buffers) + tuple(c.kernel_ir.written)}
    counter = next(p for p in func.params if p.ctype == "int32")
    assert counter.name.endswith("_arrivals") and not counter.const
    bufs = {p.name: (env[p.name].reshape(-1).copy() if p.name in env else
                     np.full(types[p.name].numel, np.nan if p.ctype == "float" else 0,
                             dtype=np.float32 if p.ctype == "float" else np.int32)) for p in func.params}
    out = next(p.name for p in func.params if not p.const and p.ctype == "float" and "partials" not in p.name)
    for order in ("forward", "reversed"):     # a second launch on the same memory: a replay
        simulate_kernel(func, bufs, block_order=order)
        assert not bufs[counter.name].any()
        np.testing.assert_allclose(bufs[out].reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(SimulationError, match="block_order"):
        simulate_kernel(func, bufs, block_order="random")


def test_the_kernel_ir_counts_with_an_integer_atomic_after_a_fence_and_broadcasts(projection):
    c, _, _ = projection
    (func,) = c.kernel_ir.kernels
    stmts = list(K.walk_stmts(func.body))
    kinds = [type(s).__name__ for s in stmts]
    fence, atomic, flag = kinds.index("ThreadFence"), kinds.index("AtomicInc"), kinds.index("Broadcast")
    assert fence < atomic < flag
    tail = next(s for s in stmts[flag:] if isinstance(s, K.If))
    assert isinstance(tail.then[0], ThreadFence)       # acquire: the others' partials after the count
    assert any(isinstance(s, K.GlobalStore) and s.buffer == "add" for s in K.walk_stmts(tail.then))
    text = str(c.kernel_ir)
    assert "atomic_inc global merged_add_arrivals[" in text and "block-uniform shared split_last[0]" in text
    cuda = str(c.cuda)
    assert "__threadfence();" in cuda and "atomicAdd(&merged_add_arrivals[" in cuda
    assert all("_arrivals[" in line for line in cuda.splitlines() if "atomic" in line)   # no float atomic


def _suite_entry(name):
    e = next(e for e in suite_entries("llm") if e.name == name)
    return deplokit.compile(e.program(), *e.inputs(empty=True), target="sm_90")


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
def test_a_suite_projection_reduces_in_the_kernel_and_nvcc_compiles_it():
    c = _suite_entry("matmul_add.qwen.o_proj.s32")       # 32 x 3584 x 3584 + the residual
    (tile,) = c.tile_ir.kernels
    assert tile.split_k.in_kernel and len(c.kernel_ir.kernels) == 1
    for arch in ("sm_80", "sm_90", "sm_120"):
        stats = compile_cuda(str(c.cuda), arch, kernel_names=c.cuda.kernels).stats
        assert set(stats) == {c.kernel_ir.kernels[0].name} and stats[c.kernel_ir.kernels[0].name].spills == 0


def test_the_cost_model_prices_the_tail_and_the_choice_keeps_the_reducer_where_cheaper(projection):
    c, _, _ = projection
    (est,) = estimate(c.tile_ir, c.kernel_ir, H100).kernels
    assert est.work.tail_round_trips == 3
    red, _, _ = _residual_projection("reducer")
    split, reducer = estimate(red.tile_ir, red.kernel_ir, H100).kernels
    assert split.work.tail_round_trips == 0
    # the tail's loads and stores run in one block of 16: the in-kernel kernel moves about the
    # split kernel's bytes plus the reducer's, and pays a tail, not a launch
    assert est.work.requested_bytes == pytest.approx(split.work.requested_bytes + reducer.work.requested_bytes,
                                                     rel=0.05)
    tail_us = 3 * CostConstants().latency_cycles / H100.clock_hz * 1e6
    assert est.time_us < split.time_us + reducer.time_us
    assert est.time_us >= split.time_us + tail_us - 0.5
    # the decision: two tiles of a 128 x 4096 output summing 16 partials each would stream
    # 34 MB through two SMs; a reducer kernel spreads it over the GPU
    assert reduce_choice(128, 4096, 1, 16, 2, H100)[0] == "reducer"
    assert reduce_choice(32, 3584, 1, 7, 56, H100)[0] == "in_kernel"


def test_a_k_tail_keeps_the_reducer_and_says_why_unless_an_overhang_absorbs_it():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(4, 1000, generator=g), torch.randn(1000, 64, generator=g)    # 62 chunks and 8
    c = deplokit.compile(lambda a, b: a @ b, a, b, config={REDUCE: "in_kernel", "003_split_matmul_k.splits": 4})
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    assert not split.in_kernel and len(c.kernel_ir.kernels) == 2
    note = next(s for s in c.trace if s.name == "003_split_matmul_k").decisions[0].note
    assert "reducer: a K tail to reduce besides the partials" in note
    assert c.check(a, b, backend="sim", atol=1e-4).ok
    # 3 splits of 21 chunks run past the 62: through the K tail (002's loop dropped), then zeros
    c = deplokit.compile(lambda a, b: a @ b, a, b, config={REDUCE: "in_kernel", "003_split_matmul_k.splits": 3})
    (tile,) = c.tile_ir.kernels
    assert tile.split_k.in_kernel and tile.split_k.overhang == 1
    env = {"a": a.numpy(), "b": b.numpy()}
    first = simulate_program(c.kernel_ir, env)[0]
    np.testing.assert_allclose(first, (a @ b).numpy(), rtol=1e-4, atol=1e-4)
    assert np.array_equal(first, simulate_program(c.kernel_ir, env, block_order="reversed")[0])
