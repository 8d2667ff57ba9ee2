"""The matmul passes: 003 split_matmul_k, 008 register_tile, 009 permute_register_tile and
014 pad_smem, each asserted on the Tile IR its trace step produces and on the Kernel IR,
with the simulator matching torch; the bank-conflict counter they score with."""
import dataclasses
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from programs import config_of, corpus

import deplokit
from deplokit.analysis.banks import conflict_degree, smem_loads
from deplokit.ir import kernel_ir as K
from deplokit.ir.loop_ir import Accumulate, Compute, Load, Loop
from deplokit.ir.tile_ir import BLOCK, Stage, walk
from deplokit.passes.lower.cuda import render_kernel
from deplokit.passes.lower.materialize import materialize
from deplokit.passes.record import PassContext
from deplokit.passes.schedule import t014_pad_smem
from deplokit.passes.schedule.block_shape import default_extents
from deplokit.runtime.sim import simulate_kernel, simulate_program

PROGRAMS = corpus()
MATMUL_PROGRAMS = ["matmul_64x256x128", "llm_projection", "matmul_small_m_long_k", "matmul_contiguous_regs"]


def compiled(name, **config):
    fn, inputs = PROGRAMS[name]
    return deplokit.compile(fn, *inputs, config={**config_of(PROGRAMS[name]), **config})


def step(c, label):
    return next(s for s in c.trace if s.stage == "tile" and s.name == label)


def after(c, label, kernel=None):
    """The kernel as the pass `label` left it (later passes may change it further)."""
    s = step(c, label)
    return s.after.kernels[0] if kernel is None else s.after.kernel(kernel)


def loads(kernel, tensor):
    return [s for s, _ in walk(kernel.tile().body) if isinstance(s, Load) and s.tensor == tensor]


def stage(kernel, name):
    return next(s for s, _ in walk(kernel.tile().body) if isinstance(s, Stage) and s.name == name)


def degrees(kernel):
    return {ld.stage: ld.degree for ld in smem_loads(kernel)}


def all_stmts(body):
    for s in body:
        yield s
        for child in ("body", "then", "orelse"):
            yield from all_stmts(getattr(s, child, ()))


# -- the bank-conflict counter -----------------------------------------------------------------

def test_conflict_degree_counts_distinct_words_per_bank():
    assert conflict_degree(range(32)) == 1                       # consecutive floats
    assert conflict_degree([0] * 32) == 1                        # one word: a broadcast
    assert conflict_degree([i // 2 for i in range(32)]) == 1     # pairs of lanes share words
    assert conflict_degree([2 * i for i in range(32)]) == 2
    assert conflict_degree([16 * i for i in range(32)]) == 16    # a column of a 16-wide tile
    assert conflict_degree([17 * i for i in range(32)]) == 1     # ... with rows padded to 17
    assert conflict_degree([20 * i for i in range(32)]) == 4     # ... padded to 20: 8 banks
    assert conflict_degree([32 * i if i < 4 else None for i in range(32)]) == 4   # inactive lanes
    assert conflict_degree([None] * 32) == 0


# -- 008 register_tile ---------------------------------------------------------------------------

# the article's register block (the tile_ir docstring's example), pinned: the defaults moved on
SHAPE_16x16 = {"005_blockify_launch.thread_shape": "16x16"}   # the article's block
OLD_PROJECTION = {
    **SHAPE_16x16,
    "008_register_tile.tm": 1,
    "008_register_tile.tn": 4,
    "008_register_tile.layout": "strided",
}
NO_REGISTER_TILE = {**SHAPE_16x16, "008_register_tile.tm": 1, "008_register_tile.tn": 1}
REDUCER = {"003_split_matmul_k.reduce": "reducer"}      # split-K reduced by a kernel of its own
STRIDED_2x4 = {
    **SHAPE_16x16,
    "008_register_tile.tm": 2,
    "008_register_tile.tn": 4,
    "008_register_tile.layout": "strided",
}

def test_register_tile_replicates_the_thread_tile():
    c = compiled("matmul_64x256x128", **{"003_split_matmul_k.splits": 1}, **STRIDED_2x4)
    k = after(c, "008_register_tile")
    assert str(k) == """\
=== merged_matmul -> matmul ===
register acc0[2, 4]
Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):2=BLOCK, a1b(N):4=BLOCK)):
    for a2o in 0..8:  # reduce (K)
        a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
        b_smem = Stage(b, origin=(a2o * 16, a1b * 64), slab=(a2i:16@0, a1:64@1))
        for a2i in 0..16:  # reduce (K)
            for a0r in 0..2:  # register (M) unroll
                in0 = load a_smem[a0r * 16 + a0t, a2i]
                for a1r in 0..4:  # register (N) unroll
                    in1 = load b_smem[a2i, a1r * 16 + a1t]
                    v0 = multiply(in0, in1)
                    acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
    for a0r in 0..2:  # register (M) unroll
        for a1r in 0..4:  # register (N) unroll
            acc0_v = load acc0[a0r, a1r]
            matmul[a0b * 32 + a0r * 16 + a0t, a1b * 64 + a1r * 16 + a1t] = acc0_v"""
    assert dict(dict(step(c, "008_register_tile").params)["merged_matmul"]) == \
        {"tm": 2, "tn": 4, "layout": "strided", "mma": "off", "wgmma_n": 0}
    # the strided layout keeps every warp's shared-memory loads conflict-free
    assert set(degrees(k).values()) == {1}
    assert c.check(backend="sim").ok


def test_register_tile_kernel_ir_is_a_register_array_in_unrolled_loops():
    c = compiled("matmul_64x256x128", **{"003_split_matmul_k.splits": 1}, **STRIDED_2x4)
    kf = c.kernel_ir.kernels[0]
    stmts = list(all_stmts(kf.body))
    arrays = [s for s in stmts if isinstance(s, K.DeclareArray)]
    assert [(a.name, a.size, a.init) for a in arrays] == [("acc0", 8, 0.0)]
    register_loops = [s for s in stmts if isinstance(s, K.For) and s.var in ("a0r", "a1r")]
    assert register_loops and all(s.unroll for s in register_loops)
    assert any(isinstance(s, K.Assign) and s.name == "acc0" and s.index is not None for s in stmts)
    assert kf.grid == (8, 1, 1) and kf.block == (256, 1, 1)
    text = render_kernel(kf, 90)
    assert "float acc0[8] = {};" in text and text.count("#pragma unroll") >= 4


def test_register_tile_keeps_partial_tiles_guarded():
    # M = 100, N = 300 are not multiples of the 32 x 64 block tile; K = 129 has a tail
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(100, 129, generator=g), torch.randn(129, 300, generator=g)
    c = deplokit.compile(lambda x, y: x @ y, a, b, config=STRIDED_2x4)
    k = after(c, "008_register_tile")
    # 20 output tiles: split-K 2 (8 chunks; the K tail goes to the reducer)
    assert [(x.var, x.extent) for x in k.tile().axes if x.kind == BLOCK] == [("a2s", 2), ("a0b", 4), ("a1b", 5)]
    stmts = list(all_stmts(c.kernel_ir.kernels[0].body))
    guarded = [s for s in stmts if isinstance(s, K.If) and any(isinstance(t, K.GlobalStore) for t in s.then)]
    assert guarded, "the store past M / N must be guarded"
    assert c.check(backend="sim").ok


def test_register_tile_defaults_and_knobs():
    # M = 32 tokens: 8 threads along M (4 rows each fill the 32 rows, where 16 threads would
    # leave 2). 4 x 4 per thread gives 4 output tiles: x 32 splits (the most at 4 K chunks each)
    # only 128 blocks for 132 SMs, so grid_plan narrows the block to 4 x 2 (8 output tiles)
    c = compiled("llm_projection")
    assert dict(dict(step(c, "005_blockify_launch").params)["merged_linear"])["thread_shape"] == "8x16"
    assert dict(dict(step(c, "008_register_tile").params)["merged_linear"]) == {
        "tm": 4, "tn": 2, "layout": "quads", "mma": "off", "wgmma_n": 0}
    assert dict(dict(step(c, "003_split_matmul_k").params)["merged_linear"]) == {"splits": 32, "reduce": "in_kernel"}
    assert c.kernel_ir.kernels[0].grid == (8 * 32, 1, 1)
    assert c.check(backend="sim").ok
    assert default_extents(32, 256, 132) == (2, 8)                 # 16 x 16 threads
    assert default_extents(32, 256, 132, (8, 32)) == (4, 4)
    assert default_extents(4096, 4096, 132) == (8, 8)          # 1024 blocks: 8 x 8 keeps FFMA-bound
    assert default_extents(512, 3584, 132) == (8, 8)           # 112 blocks: halving gives 224 > 132
    assert default_extents(128, 3584, 132) == (4, 4)           # 28 blocks: halved while 2x fits
    c = compiled("matmul_64x256x128", **{"008_register_tile.tm": 1, "008_register_tile.tn": 8})
    k = after(c, "008_register_tile")
    assert [(x.var, x.extent) for x in k.tile().axes if x.kind == BLOCK] == [("a2s", 2), ("a0b", 4), ("a1b", 2)]
    assert stage(k, "b_smem").slab[-1].extent == 128
    assert c.check(backend="sim").ok
    c = compiled("matmul_64x256x128", **{"008_register_tile.tm": 1, "008_register_tile.tn": 1})
    assert step(c, "008_register_tile").skipped_reason.startswith("merged_matmul: tm=1, tn=1: one output per thread")
    # matmul_odd: M = 37 fills a 32-row block tile (16 threads along M, 2 rows each), the
    # second block's rows past 37 guarded; N = 13 takes 8 threads, one column each
    c = compiled("matmul_odd")
    assert dict(dict(step(c, "005_blockify_launch").params)["merged_matmul"])["thread_shape"] == "16x8"
    assert dict(dict(step(c, "008_register_tile").params)["merged_matmul"])["tm"] == 2
    assert c.check(backend="sim").ok
    with pytest.raises(deplokit.DeplokitError, match="outside its domain"):
        compiled("matmul_64x256x128", **{"008_register_tile.tm": 3})


def test_register_tile_hoists_prologue_out_of_the_register_loop():
    c = compiled("llama_layer_small", **SHAPE_16x16)       # M = 16: one row of threads
    k = after(c, "008_register_tile", "down_proj_add")
    k_loop = next(s for s, _ in walk(k.tile().body) if isinstance(s, Loop) and s.var == "a2i")
    # silu(gate) * up is a prologue staged with down_proj's A slab (issue 26): the loop reads
    # it from the stage; its value does not depend on the register slot, so that load stays
    # outside the register loop: once per k
    assert [type(s).__name__ for s in k_loop.body] == ["Load", "Loop"]
    staged = k_loop.body[0]
    reg = k_loop.body[-1]
    assert reg.kind == "register" and reg.role == "N"
    product = next(s for s in reg.body if isinstance(s, Compute) and s.op == "multiply")
    assert staged.dst in product.args
    acc = [s for s in reg.body if isinstance(s, Accumulate)][0]
    assert acc.text() == f"acc0[a1r] <- add(acc0[a1r], {product.dst})"


# -- 009 permute_register_tile -----------------------------------------------------------------

def test_permute_register_tile_rotates_a_contiguous_strip():
    c = compiled("matmul_contiguous_regs")
    before, after9 = after(c, "008_register_tile"), after(c, "009_permute_register_tile")
    assert dict(dict(step(c, "008_register_tile").params)["merged_matmul"])["tm"] == 4
    # contiguous slots: B's 4 slots per lane are one aligned float4 (an LDS.128, conflict-free);
    # A's rows are 4 apart, so a warp's two M-threads read words 64 apart: the same bank
    assert [str(ld.index[1]) for ld in loads(before, "b_smem")] == ["a1t * 4 + a1r"]
    assert degrees(before) == {"a_smem": 2, "b_smem": 1}
    assert degrees(after9) == {"a_smem": 1, "b_smem": 1}
    # 009 rotates A's strip only: rotating B's would split its float4 into scalar loads
    assert [str(ld.index[0]) for ld in loads(after9, "a_smem")] == ["a0t * 4 + ((a0r + a0t) % 4)"]
    assert [str(ld.index[1]) for ld in loads(after9, "b_smem")] == ["a1t * 4 + a1r"]
    def waves(k):
        return {ld.stage: ld.wavefronts for ld in smem_loads(k)}
    # per k step: 4 A loads, 2 wavefronts each before, 1 after; B: one float4 per M slot
    assert (waves(before), waves(after9)) == ({"a_smem": 8, "b_smem": 4}, {"a_smem": 4, "b_smem": 4})
    # the accumulator keeps its slot; the store follows the row the slot now computes
    acc = next(s for s, _ in walk(after9.tile().body) if isinstance(s, Accumulate))
    assert acc.text() == "acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)"
    assert c.check(backend="sim").ok


def test_permute_register_tile_knob_and_skip_reasons():
    c = compiled("matmul_contiguous_regs", **{"009_permute_register_tile.permute": False})
    assert step(c, "009_permute_register_tile").skipped_reason == \
        "merged_matmul: permutation disabled by the knob"
    assert degrees(after(c, "009_permute_register_tile")) == {"a_smem": 2, "b_smem": 1}
    assert c.check(backend="sim").ok
    reason = step(compiled("matmul_64x256x128", **STRIDED_2x4), "009_permute_register_tile").skipped_reason
    assert "strided register layout" in reason
    assert "no register tile" in step(compiled("rms_norm_seed"), "009_permute_register_tile").skipped_reason


# -- 014 pad_smem ----------------------------------------------------------------------------------

def test_pad_smem_breaks_the_column_conflict_of_a_linear_weight_tile():
    c = compiled("llm_projection", **OLD_PROJECTION)   # the weight tile read along n, strided
    k = after(c, "009_permute_register_tile")           # what 014 sees, before the copy passes
    assert stage(k, "p_weight_smem").slab[0].extent == 64   # 16 * tn rows of n, 16 floats of k each
    assert degrees(k) == {"input_smem": 1, "p_weight_smem": 8}
    figures = {}
    for pad in (1, 4):
        out = t014_pad_smem.apply(k, PassContext(c.target, {"pad": pad}, c.tile_ir.types()))
        assert stage(out, "p_weight_smem").pad == pad and stage(out, "input_smem").pad == 0
        figures[pad] = degrees(out)["p_weight_smem"]
    assert figures == {1: 1, 4: 2}
    assert t014_pad_smem._default_pad(k, c.target) == 1
    skip = t014_pad_smem.apply(k, PassContext(c.target, {"pad": 0}, c.tile_ir.types()))
    assert skip.reason == "padding disabled by the knob (pad=0)"


def test_pad_smem_is_honoured_by_the_materialiser():
    c = compiled("linear_bias", **NO_REGISTER_TILE)
    s9 = step(c, "009_permute_register_tile")
    padded = t014_pad_smem.apply(s9.after.kernels[0], PassContext(c.target, {"pad": 1}, s9.after.types()))
    assert stage(padded, "p_weight_smem").pad == 1
    prog = materialize(dataclasses.replace(s9.after, kernels=(padded,) + s9.after.kernels[1:]))
    arrays = {s.name: s.size for s in all_stmts(prog.kernels[0].body) if isinstance(s, K.SharedArray)}
    assert arrays["p_weight_smem"] == 16 * 17
    fn, inputs = PROGRAMS["linear_bias"]
    env = dict(c.values)
    env.update(c._bind(inputs))
    (got,) = simulate_program(prog, env)   # the split kernel, then its reducer
    with torch.no_grad():
        np.testing.assert_allclose(got, fn(*inputs).numpy(), rtol=1e-4, atol=1e-5)
    # end to end, with whatever copy the later passes chose (pad 4 keeps 16-byte rows)
    c = compiled("linear_bias", **{"014_pad_smem.pad": 4}, **NO_REGISTER_TILE)
    assert stage(after(c, "014_pad_smem"), "p_weight_smem").pad == 4
    assert all(p.result.ok for p in c.check_passes())


def test_pad_smem_skips_what_has_no_conflict():
    assert step(compiled("rms_norm_seed"), "014_pad_smem").skipped_reason == \
        "merged_rms_norm: no stage's loads conflict on shared-memory banks"
    k = after(compiled("matmul_64x256x128"), "009_permute_register_tile")
    assert set(degrees(k).values()) == {1}
    assert (
        t014_pad_smem.apply(k, PassContext(None, {"pad": 1})).reason
        == "no stage's loads conflict on shared-memory banks"
    )


# -- 003 split_matmul_k -------------------------------------------------------------------------

def test_split_k_promotes_k_outer_chunks_to_a_grid_axis():
    c = compiled("llm_projection", **REDUCER)
    # 8 output tiles on 132 SMs: the fewest splits that give every SM a block (4 chunks each)
    assert dict(dict(step(c, "003_split_matmul_k").params)["merged_linear"]) == {"splits": 32, "reduce": "reducer"}
    s3 = step(c, "003_split_matmul_k")
    main, red = s3.after.kernels
    assert str(main) == """\
=== merged_linear -> merged_linear_partials ===
split-K 32 into merged_linear_partials, reduced by merged_linear_reduce  # deterministic
Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD, a2s(K):32=BLOCK)):
    for a2o in 0..4:  # reduce (K)
        for a2i in 0..16:  # reduce (K)
            in0 = load input[0, a0, a2s * 64 + a2o * 16 + a2i]
            in1 = load p_weight[a1, a2s * 64 + a2o * 16 + a2i]
            v0 = multiply(in0, in1)
            acc0 <- add(acc0, v0)
    merged_linear_partials[a2s, 0, a0, a1] = acc0"""
    lines = str(red).splitlines()
    assert lines[:4] == ["=== merged_linear_reduce -> linear ===",
                         "reduces merged_linear  # its split-K partial sums, in split order",
                         "Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD)):",
                         "    acc0_p0 = load merged_linear_partials[0, 0, a0, a1]"]
    assert lines[-3:] == ["    acc0_p31 = load merged_linear_partials[31, 0, a0, a1]",
                          "    acc0_s31 = add(acc0_s30, acc0_p31)", "    linear[0, a0, a1] = acc0_s31"]
    ws = next(b for b in s3.after.written if b.name == "merged_linear_partials")
    assert ws.kind == "temp" and ws.type.shape == (32, 1, 32, 256)
    # blockify keeps the split axis as the slowest grid axis (8 x 16 threads: 4 x 16 blocks of
    # threads); stages cover one split's chunk
    k5 = after(c, "005_blockify_launch")
    assert [(x.var, x.role, x.extent) for x in k5.tile().axes if x.kind == BLOCK] == \
        [("a2s", "K", 32), ("a0b", "M", 4), ("a1b", "N", 16)]
    assert str(stage(after(c, "007_stage_inputs"), "p_weight_smem").origin[1]) == "a2s * 64 + a2o * 16"


def test_split_k_stores_partials_then_a_reducer_adds_them_without_atomics():
    c = compiled("llm_projection", **REDUCER)
    main, red = c.kernel_ir.kernels
    assert (main.name, red.name, red.reduces_for) == ("merged_linear", "merged_linear_reduce", "merged_linear")
    # 8 blocks of 32 x 32 (8 x 16 threads, 4 x 2 each) x 32 splits (4 K chunks each): 4 x 4
    # per thread would leave 128 blocks for 132 SMs (grid_plan.py)
    assert main.grid == (8 * 32, 1, 1)
    assert [p.name for p in red.params] == ["merged_linear_partials", "linear"]
    text = str(c.cuda)
    assert "atomic" not in text and text.index("void merged_linear(") < text.index("void merged_linear_reduce(")
    # on a GPU the output and the workspace hold garbage: nothing may rely on zeros
    fn, (x,) = PROGRAMS["llm_projection"]
    bufs = {"input": x.numpy().reshape(-1), "p_weight": fn.weight.detach().numpy().reshape(-1),
            "linear": np.full(32 * 256, np.nan, dtype=np.float32),
            "merged_linear_partials": np.full(32 * 32 * 256, np.nan, dtype=np.float32)}
    for kf in c.kernel_ir.kernels:
        simulate_kernel(kf, {p.name: bufs[p.name] for p in kf.params}, max_block_threads=1024)
    with torch.no_grad():
        expected = fn(x).numpy().reshape(-1)
    np.testing.assert_allclose(bufs["linear"], expected, rtol=1e-4, atol=1e-5)
    # one fixed order of float adds: bit-identical run to run
    first = c.run(x, backend="sim")
    assert torch.equal(first, c.run(x, backend="sim"))
    assert c.check(backend="sim").ok


def test_split_k_small_m_long_k_and_the_knob():
    c = compiled("matmul_small_m_long_k")
    # 4 x 64 outputs: 32 splits of 4 chunks give at most 4 tiles x 32 = 128 blocks for 132 SMs,
    # so grid_plan takes 64 splits of 2 chunks over 4 tiles of 4 x 16 threads, 1 output each
    assert dict(dict(step(c, "003_split_matmul_k").params)["merged_matmul"])["splits"] == 64
    assert c.kernel_ir.kernels[0].grid == (4 * 64, 1, 1)
    assert c.check(backend="sim").ok
    c = compiled("matmul_small_m_long_k", **{"003_split_matmul_k.splits": 4})
    assert [(x.var, x.extent) for x in after(c, "003_split_matmul_k").tile().axes if x.kind == BLOCK] == [("a2s", 4)]
    # a split walks 512 products one by one: a long float32 sum drifts past atol 1e-5
    assert c.check(backend="sim", atol=1e-4).ok
    c = compiled("matmul_small_m_long_k", **{"003_split_matmul_k.splits": 1})
    assert len(c.kernel_ir.kernels) == 1
    assert c.check(backend="sim", atol=1e-4).ok


@pytest.mark.parametrize("fn, shapes", [
    (lambda a, b: torch.relu(a @ b), ((4, 1024), (1024, 64))),                    # an activation
    (lambda a, b, bias: a @ b + bias, ((4, 1024), (1024, 64), (64,))),            # a bias
    (lambda a, b, res: F.silu(a @ b) + res, ((4, 1024), (1024, 64), (4, 64))),    # a residual
    (lambda a, b: a @ b, ((4, 1000), (1000, 64))),                                # a K tail of 8
    (lambda a, b, bias: torch.tanh(a @ b + bias), ((20, 1032), (1032, 100), (100,))),  # tail, ragged tiles
])
def test_split_k_reduces_any_epilogue_and_k_tails_deterministically(fn, shapes):
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(*s, generator=g) for s in shapes]
    c = deplokit.compile(fn, *inputs)
    assert step(c, "003_split_matmul_k").changed
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    if split.in_kernel:        # the last block of each tile adds them: one kernel, an int counter
        assert len(c.kernel_ir.kernels) == 1 and split.counter
    else:                      # a K tail: the reducer's
        main, red = c.kernel_ir.kernels[:2]
        assert red.reduces_for == main.name and "atomic" not in str(c.cuda)
    assert c.check(*inputs, backend="sim", atol=1e-4).ok
    assert torch.equal(c.run(*inputs, backend="sim"), c.run(*inputs, backend="sim"))


@pytest.mark.parametrize("fn, shapes, reason", [
    (lambda a, b: torch.where(a @ b > 0, a @ b, 0.0), ((4, 1024), (1024, 64)), "2 K reductions in one kernel"),
    (lambda a, b: a @ b, ((2048, 128), (128, 2048)), "about 256 blocks of 256 threads already fill the grid"),
])
def test_split_k_skips_with_the_reason(fn, shapes, reason):
    g = torch.Generator().manual_seed(2)
    c = deplokit.compile(fn, *(torch.randn(*s, generator=g) for s in shapes))
    s = step(c, "003_split_matmul_k")
    assert not s.changed
    assert reason in s.skipped_reason


def test_split_k_needs_two_chunks_per_split_and_leaves_the_rest_to_the_reducer():
    g = torch.Generator().manual_seed(3)
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(4, 192, generator=g), torch.randn(192, 64, generator=g),
                         config={"003_split_matmul_k.splits": 8})
    assert step(c, "003_split_matmul_k").skipped_reason == "merged_matmul: 12 K chunks do not make 8 splits of 2"
    c = deplokit.compile(lambda a, b: (a @ b) * 0.5, torch.randn(4, 192, generator=g),
                         torch.randn(192, 64, generator=g), config={"003_split_matmul_k.splits": 4})
    assert step(c, "003_split_matmul_k").changed
    assert c.check(backend="sim").ok
    # 13 chunks of 16 and a tail of 5 in 4 splits of 3: chunk 12 (one loop of 16) and 002's
    # tail (5, as it was) are the reducer's, after the partials' order is fixed: bit-identical reruns
    a, b = torch.randn(4, 213, generator=g), torch.randn(213, 64, generator=g)
    c = deplokit.compile(lambda a, b: (a @ b) * 0.5, a, b, config={"003_split_matmul_k.splits": 4})
    main, red = step(c, "003_split_matmul_k").after.kernels
    assert main.split_k.leftover == 1 and "1 K chunks left to it" in str(main)
    assert [(s.var, s.extent) for s in red.tile().body if isinstance(s, Loop)] == [("a2r", 16), ("a2t", 5)]
    assert c.check(backend="sim", atol=1e-4).ok
    assert torch.equal(c.run(a, b, backend="sim"), c.run(a, b, backend="sim"))


# A K built from two reshaped input axes: 002 simplified the chunk body's index under its
# ranges ((ko * 16 + ki) // 32 read as ko // 2, ki below 16), so the reducer's leftover run
# must enter as chunk tv // 16 and lane tv % 16 (it once read one 256-long run along an
# axis of 32 or 96 elements). Default knobs: 003 picks 32 splits of 144 chunks, 16 left over.
def _reshaped_k_matmul(g):
    return (lambda x, w: x.reshape(6, 2304) @ w), (torch.randn(6, 72, 32, generator=g),
                                                    torch.randn(2304, 16, generator=g))


def _patch_mixer_linear(g):
    return ((lambda x, w, b, s, m: F.linear(x.reshape(2, 3, 2304), w, b).transpose(1, 2) * s + m),
            (torch.randn(2, 3, 72, 32, generator=g), torch.randn(16, 2304, generator=g),
             torch.randn(16, generator=g), torch.randn(16, 1, generator=g), torch.randn(16, 3, generator=g)))


def _attention_out_projection(g):
    return ((lambda o, w: F.linear(o.transpose(1, 2).reshape(2, 3, 24 * 96), w)),
            (torch.randn(2, 24, 3, 96, generator=g), torch.randn(32, 2304, generator=g)))


@pytest.mark.parametrize("make", [_reshaped_k_matmul, _patch_mixer_linear, _attention_out_projection])
def test_split_k_leftover_over_a_k_of_reshaped_axes_is_exact_at_default_knobs(make):
    fn, inputs = make(torch.Generator().manual_seed(0))
    c = deplokit.compile(fn, *inputs)
    split = next(k.split_k for k in step(c, "003_split_matmul_k").after.kernels if k.split_k)
    assert split.splits == 32 and split.leftover == 16
    assert c.check(backend="sim", atol=1e-3).ok


# -- every pass, every new corpus program ---------------------------------------------------------

@pytest.mark.parametrize("name", MATMUL_PROGRAMS)
def test_check_passes_after_every_pass(name):
    bad = [str(p) for p in compiled(name).check_passes() if not p.result.ok]
    assert not bad, bad


# -- the warp-wide main loop (issue 14 part 2) ---------------------------------------------------

@pytest.mark.parametrize("shapes, config", [
    (((130, 77), (77, 150)), {}),                                           # defaults: 8 x 4 quads
    (((130, 77), (77, 150)), {"008_register_tile.tm": 8, "008_register_tile.tn": 8}),
    (((37, 45), (45, 139)), {"008_register_tile.tn": 8, "008_register_tile.layout": "quads"}),
])
def test_quads_layout_is_exact_on_odd_shapes(shapes, config):
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(*s, generator=g) for s in shapes)
    c = deplokit.compile(lambda x, y: x @ y, a, b, config=config)
    assert dict(dict(step(c, "008_register_tile").params)["merged_matmul"])["layout"] == "quads"
    assert c.check(backend="sim").ok


def test_quads_layout_reads_b_as_conflict_free_float4s():
    c = compiled("matmul_64x256x128", **{"008_register_tile.tm": 8, "008_register_tile.tn": 8,
                                         "003_split_matmul_k.splits": 1})
    k = after(c, "008_register_tile")
    # slot r of thread t: quad r // 4 (64 columns apart), float r % 4 within it
    assert [str(ld.index[1]) for ld in loads(k, "b_smem")] == ["a1t * 4 + (a1r // 4) * 64 + (a1r % 4)"]
    b = next(ld for ld in smem_loads(k) if ld.stage == "b_smem")
    # tm is capped at the 4 blocks of M = 64: 32 slots (4 x 8) = 8 float4 accesses of 1
    # wavefront each: conflict-free
    assert (b.slots, b.wavefronts, b.degree) == (32, 8, 1)
    assert "quads register layout" in step(c, "009_permute_register_tile").skipped_reason
    assert c.check(backend="sim").ok


def test_mark_unroll_unrolls_the_k_loop_of_a_register_tile():
    def k_loop(c):
        return next(s for s, _ in walk(after(c, "016_mark_unroll").tile().body)
                    if isinstance(s, Loop) and s.var == "a2i")
    assert k_loop(compiled("matmul_64x256x128")).unroll
    assert not k_loop(compiled("matmul_64x256x128", **{"016_mark_unroll.unroll_k": False})).unroll


def test_copy_units_of_a_whole_number_per_thread_are_an_unrolled_loop():
    # the threads' copy (cp.async: on sm_90 TMA would copy each box with one instruction)
    c = compiled("matmul_64x256x128", **{"008_register_tile.tm": 8, "008_register_tile.tn": 8,
                                         "003_split_matmul_k.splits": 1, "011_tma_copy.enable": False})
    text = str(c.cuda)
    # 16 x 128 floats of B = 512 float4 over 256 threads: two each, in a loop nvcc can count
    loop = re.search(r"#pragma unroll\n\s*for \(int (\w+_smem_i_r) = 0; \1 < 2; \+\+\1\)", text)
    assert loop and f"int {loop.group(1)[:-2]} = (int)threadIdx.x + {loop.group(1)} * 256;" in text
