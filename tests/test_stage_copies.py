"""How stages are copied: 010 double_buffer, 011 tma_copy, 012 split_inner_for_swizzle,
013 async_copy, 015 pipeline_k_outer, and materialize's float4 / cp.async / TMA copies.

Each pass's effect on the Tile IR and the Kernel IR, the reasons it records where it does
not apply, that every variant still matches torch in the simulator (whose race checker
watches every barrier the copies rely on), and that the CUDA compiles for every target."""
import dataclasses

import pytest
import torch

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.tile_ir import Stage, TileProgram, walk
from deplokit.passes.lower.materialize import materialize
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import SimulationError, simulate_program
from programs import corpus

PROGRAMS = corpus()
TARGETS = ["sm_80", "sm_90", "sm_120"]
ONLY_010 = {"011_tma_copy.enable": False, "013_async_copy.enable": False, "015_pipeline_k_outer.enable": False}


def build(name, target="sm_90", config=None):
    fn, inputs = PROGRAMS[name]
    return deplokit.compile(fn, *inputs, target=target, config=config or {})


def step(c, label):
    return next(s for s in c.trace if s.stage == "tile" and s.name == label)


def stages(c):
    return [s for k in c.tile_ir.kernels for s, _ in walk(k.body) if isinstance(s, Stage)]


def nodes(body, kind):
    for s in body:
        if isinstance(s, kind):
            yield s
        for child in ("body", "then", "orelse"):
            yield from nodes(getattr(s, child, ()), kind)


def k_loop(kernel, var="a2o"):
    return next(s for s in nodes(kernel.body, K.For) if s.var == var)


def top_level(body, kind):
    return [s for s in body if isinstance(s, kind)]


# -- 010 double_buffer -----------------------------------------------------------------------

def test_double_buffer_ping_pongs_with_one_barrier_per_iteration():
    c = build("relu_matmul_seed", config=ONLY_010)
    st = step(c, "010_double_buffer")
    assert st.changed
    assert "x_smem = BufferedStage(x, origin=(0, a2o * 16)" in str(st.after)
    assert "x_smem = Stage(x" in str(st.before)
    (kernel,) = c.kernel_ir.kernels
    loop = k_loop(kernel)
    # the copies fill buffer a2o % 2; one barrier after them, none before (the buffer's last
    # readers ran two iterations ago, before the previous iteration's barrier)
    assert len(top_level(loop.body, K.Barrier)) == 1
    assert isinstance(loop.body[-2], K.Barrier) and isinstance(loop.body[-1], K.For)
    assert {a.size for a in nodes(kernel.body, K.SharedArray)} == {512, 32}      # two buffers of 256 / 16
    assert "(a2o % 2) * 256" in str(kernel)
    assert c.check(backend="sim").ok


def test_double_buffer_skips_without_a_k_loop_and_by_knob():
    c = build("rms_norm_seed")
    assert "no matmul K-outer loop" in step(c, "010_double_buffer").skipped_reason
    c = build("relu_matmul_seed", config={"010_double_buffer.enable": False})
    st = step(c, "010_double_buffer")
    assert not st.changed and "disabled by the knob" in st.skipped_reason
    # single buffers: a barrier before the refill and one after the copies
    loop = k_loop(c.kernel_ir.kernels[0])
    assert len(top_level(loop.body, K.Barrier)) == 2
    assert c.check(backend="sim").ok


# -- sync copies: float4 ---------------------------------------------------------------------------

def test_sync_stage_copies_use_float4_where_rows_are_aligned():
    c = build("relu_matmul_seed", config=ONLY_010)
    (kernel,) = c.kernel_ir.kernels
    assert len(list(nodes(kernel.body, K.VectorLoad))) == 3          # x, bias, w: 128-bit global loads
    assert len(list(nodes(kernel.body, K.VectorStore))) == 3
    assert not [g for s in nodes(kernel.body, K.SharedStore) for g in [s]]   # no scalar copy left
    # K = 129: rows of 129 floats are not 16-byte aligned: scalar copies
    c = build("linear_bias", config=ONLY_010)
    assert not list(nodes(c.kernel_ir.kernels[0].body, K.VectorLoad))
    assert c.check(backend="sim").ok


# -- 011 tma_copy ---------------------------------------------------------------------------------

def test_tma_stages_only_on_sm_90():
    for target in TARGETS:
        c = build("relu_matmul_seed", target)
        text = str(c.tile_ir)
        st = step(c, "011_tma_copy")
        if target == "sm_90":
            assert st.changed and text.count("TmaBufferedStage(") == 3
        else:
            assert "TmaBufferedStage" not in text and text.count("AsyncBufferedStage(") == 3
            assert not st.changed and f"{target} has no TMA" in st.skipped_reason
            assert all("has no TMA" in d.skipped for d in st.decisions)


def test_tma_kernel_ir_full_and_empty_mbarrier_rings():
    c = build("relu_matmul_seed", "sm_90")
    (kernel,) = c.kernel_ir.kernels
    full, empty = nodes(kernel.body, K.MbarrierInit)
    # full[s]: the producer's one arrive.expect_tx; empty[s]: every thread when done reading
    assert (full.name, full.count, full.slots) == ("a2o_full", 1, 2)
    assert (empty.name, empty.count, empty.slots) == ("a2o_empty", 256, 2)
    i = kernel.body.index(empty)
    assert isinstance(kernel.body[i + 1], K.Barrier)                # other threads use them after a barrier
    prologue = [s for s in kernel.body[i:] if isinstance(s, K.If)][0]
    arrive, *_ = prologue.then
    loads = list(nodes(prologue.then, K.TmaLoad))
    # x: 16 rows of 16 floats (its rows are 64 floats apart); bias: one row; w (64 x 16):
    # the slab spans w's full width, so its 16 rows are one contiguous 256-float copy
    assert [(t.array, t.count) for t in loads] == [("x_smem", 16), ("bias_smem", 16), ("w_smem", 256)]
    assert {(t.barrier, t.slot, t.expect) for t in loads} == {("a2o_full", K.Const(0, "int"), False)}
    assert isinstance(arrive, K.MbarrierArrive) and arrive.expect_tx == 4 * (16 * 16 + 16 + 256)
    loop = k_loop(kernel)
    # consumers wait full[ko % 2] for round ko / 2; the producer waits empty[slot] before a refill;
    # the loop ends with every thread's arrival on empty[ko % 2]; no block-wide barrier in the loop
    waits = [K.format_expr(w.slot) + " " + K.format_expr(w.phase) for w in nodes(loop.body, K.MbarrierWait)]
    assert waits == ["(a2o % 2) (a2o / 2)", "((a2o + 1) % 2) (((a2o + 1) / 2) + 1)"]
    assert isinstance(loop.body[-1], K.MbarrierArrive) and loop.body[-1].name == "a2o_empty"
    assert not list(nodes(loop.body, K.Barrier))
    assert c.check(backend="sim").ok


def test_tma_whole_width_slab_of_unaligned_rows_is_one_copy():
    # b (129 x 13): rows of 13 floats (52 bytes) cannot be bulk copies, but a K chunk of 16
    # whole rows is one contiguous, 16-byte aligned run of 208 floats; a (37 x 129) cannot
    c = build("matmul_odd", "sm_90", {"003_split_matmul_k.splits": 1})    # one kernel, K unsplit
    kinds = {s.name: s.copy for s in stages(c)}
    assert kinds["b_smem"] == "tma" and kinds["a_smem"] == "async"
    counts = {t.count for t in nodes(c.kernel_ir.kernels[0].body, K.TmaLoad)}
    assert counts == {208}
    assert c.check(backend="sim").ok


def test_tma_leaves_slabs_of_many_rows_to_cp_async():
    # one thread issues every bulk copy: x (16 rows) stays TMA under max_copies=16, not under 8
    c = build("relu_matmul_seed", "sm_90", {"011_tma_copy.max_copies": 8})
    kinds = {s.name: s.copy for s in stages(c)}
    assert kinds == {"x_smem": "async", "bias_smem": "tma", "w_smem": "tma"}
    assert c.check(backend="sim").ok
    # a Linear weight tile of 64 rows of 64 bytes: cp.async (and 014 pads it)
    c = build("llm_projection", "sm_90", {"011_tma_copy.max_copies": 32})
    kinds = {s.name: (s.copy, s.pad) for s in stages(c)}
    assert kinds["input_smem"][0] == "tma" and kinds["p_weight_smem"][0] == "async"
    # by default a register-tiled matmul leaves slabs of more than 8 rows to cp.async: one
    # thread's row copies would cost its FFMA-bound K loop more issue slots
    st = step(build("llm_projection", "sm_90"), "011_tma_copy")
    assert not st.changed and "input_smem: 32 bulk copies per iteration, more than max_copies=8" in st.skipped_reason


def test_unaligned_rows_skip_tma_with_the_reason():
    c = build("linear_bias", "sm_90")
    st = step(c, "011_tma_copy")
    assert not st.changed
    assert "row stride of input is 129 floats (516 bytes): rows are not 16-byte aligned" in st.skipped_reason


# -- 012 split_inner_for_swizzle ------------------------------------------------------------------

def test_split_rows_that_cross_the_tensor_end_into_atoms():
    # one output per thread (008 off): the 16-wide N tile whose last rows cross N = 40
    c = build("matmul_ragged_n", "sm_90", {"008_register_tile.tm": 1, "008_register_tile.tn": 1})
    st = step(c, "012_split_inner_for_swizzle")
    assert st.changed
    after = str(st.after)
    assert "b_smem = TmaBufferedStage(b, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1to:2@1, a1ti:8@1), bulk=32x8)" in after
    assert "load b_smem[a2i, a1t // 8, a1t % 8]" in after
    (kernel,) = c.kernel_ir.kernels
    b_loads = [t for t in nodes(kernel.body, K.TmaLoad) if t.array == "b_smem"]
    assert {t.count for t in b_loads} == {8}                        # 32-byte atoms: 40 = 5 x 8
    assert "min(" in K.format_expr(b_loads[0].src_offset)            # atoms past column 40: clamped
    # the loads fold the split back: b_smem[... + a2i * 16 + a1t]
    assert "((a2i * 16) + a1t)" in str(kernel)
    assert c.check(backend="sim").ok


def test_split_skips_rows_inside_the_tensor_and_records_why():
    c = build("relu_matmul_seed", "sm_90")
    st = step(c, "012_split_inner_for_swizzle")
    assert not st.changed and "no swizzle mode" in st.skipped_reason
    c = build("relu_matmul_seed", "sm_80")
    assert "no TMA stage" in step(c, "012_split_inner_for_swizzle").skipped_reason


# -- 013 async_copy -------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_async_copy_on_every_target(target):
    c = build("rms_norm_seed", target)
    assert "x_smem = AsyncStage(x" in str(c.tile_ir)
    (kernel,) = c.kernel_ir.kernels
    copies = list(nodes(kernel.body, K.CpAsync))
    assert copies and {cp.nbytes for cp in copies} == {16}           # rows of 2048 floats: 16-byte copies
    body = kernel.body
    i = next(j for j, s in enumerate(body) if isinstance(s, K.CpAsyncCommit))
    assert isinstance(body[i + 1], K.CpAsyncWait) and body[i + 1].pending == 0 and isinstance(body[i + 2], K.Barrier)
    assert c.check(backend="sim").ok


def test_async_copy_falls_back_to_4_bytes_on_unaligned_rows():
    c = build("linear_bias", "sm_80")
    text = str(c.tile_ir)
    assert "AsyncBufferedStage(input" in text and "AsyncStage(p_bias" in text
    copies = list(nodes(c.kernel_ir.kernels[0].body, K.CpAsync))
    assert {cp.nbytes for cp in copies} == {4}
    assert c.check(backend="sim").ok


def test_async_copy_knob():
    c = build("rms_norm_seed", "sm_80", {"013_async_copy.enable": False})
    st = step(c, "013_async_copy")
    assert not st.changed and "disabled by the knob" in st.skipped_reason
    assert not list(nodes(c.kernel_ir.kernels[0].body, K.CpAsync))
    assert list(nodes(c.kernel_ir.kernels[0].body, K.VectorLoad))    # float4 sync copy instead


# -- 015 pipeline_k_outer -------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_pipeline_rotates_the_k_loop(target):
    c = build("relu_matmul_seed", target)
    assert step(c, "015_pipeline_k_outer").changed
    assert str(c.tile_ir).count(", prefetch=1)") == 3
    (kernel,) = c.kernel_ir.kernels
    body = kernel.body
    loop_at = next(j for j, s in enumerate(body) if isinstance(s, K.For) and s.var == "a2o")
    prologue = body[:loop_at]
    loop = body[loop_at]
    tma = target == "sm_90"
    issue = K.TmaLoad if tma else K.CpAsync
    assert list(nodes(prologue, issue))                             # tile 0 issued before the loop
    head = loop.body
    wait = K.MbarrierWait if tma else K.CpAsyncWait
    assert isinstance(head[0], wait) and isinstance(head[1], K.Barrier) != tma
    guard = next(s for s in head if isinstance(s, K.If))
    assert K.format_expr(guard.cond) == "((a2o + 1) < 4)"          # the last iteration issues nothing
    assert list(nodes(guard.then, issue))
    # one barrier per iteration; none with TMA alone (its full/empty mbarriers order the slots)
    assert len(top_level(head, K.Barrier)) == (0 if tma else 1)
    assert c.check(backend="sim").ok


def test_pipeline_needs_asynchronous_double_buffered_stages():
    c = build("relu_matmul_seed", "sm_80", {"013_async_copy.enable": False})
    st = step(c, "015_pipeline_k_outer")
    assert not st.changed and "is synchronous: its copy cannot run ahead of the compute" in st.skipped_reason
    c = build("relu_matmul_seed", "sm_80", {"015_pipeline_k_outer.enable": False})
    st = step(c, "015_pipeline_k_outer")
    assert not st.changed and "disabled by the knob" in st.skipped_reason
    loop = k_loop(c.kernel_ir.kernels[0])
    assert isinstance(loop.body[-2], K.Barrier) and len(top_level(loop.body, K.Barrier)) == 1
    assert c.check(backend="sim").ok
    assert "no matmul K-outer loop" in step(build("softmax_odd"), "015_pipeline_k_outer").skipped_reason


# -- AsyncWait: where asynchronous copies land ------------------------------------------------------

RELU_STAGES = """\
        x_smem = {kind}(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1){x}{extra})
        bias_smem = {kind}(bias, origin=(a2o * 16), slab=(a2i:16@0){bias}{extra})
        w_smem = {kind}(w, origin=(a2o * 16, 0), slab=(a2i:16@0, a1:16@1){w}{extra})"""
# the bulk copies 011 stamps on the TMA stages: a row each of x, one of bias, w's 16 full-width
# rows merged into one run
RELU_BULK = {"x": ", bulk=16x16", "bias": ", bulk=1x16", "w": ", bulk=1x256"}
NO_BULK = {"x": "", "bias": "", "w": ""}
RELU_WAIT = "        AsyncWait(x_smem, bias_smem, w_smem)"
RELU_LOOP = "    for a2o in 0..4:  # reduce (K)"
RELU_INNER = "        for a2i in 0..16:  # reduce (K)"


def test_async_wait_follows_the_cp_async_stages():
    # 013 puts the wait right after the group it made asynchronous (sm_80: no TMA); before
    # 015 (check_passes materialises this Tile IR too) the loop waits after its copies
    c = build("relu_matmul_seed", "sm_80")
    after = str(step(c, "013_async_copy").after)
    stages = RELU_STAGES.format(kind="AsyncBufferedStage", extra="", **NO_BULK)
    assert "\n".join([RELU_LOOP, stages, RELU_WAIT, RELU_INNER]) in after
    assert "AsyncWait" not in str(step(c, "013_async_copy").before)
    program = materialize(step(c, "013_async_copy").after)
    loop = k_loop(program.kernels[0])
    kinds = [type(s).__name__ for s in loop.body]
    # copies, commit; then the AsyncWait: wait_group 0 and the barrier that makes them visible
    assert kinds[-4:] == ["CpAsyncCommit", "CpAsyncWait", "Barrier", "For"]
    # not pipelined (015 disabled): the final Tile IR keeps the wait after the stages
    c = build("relu_matmul_seed", "sm_80", {"015_pipeline_k_outer.enable": False})
    assert "\n".join([stages, RELU_WAIT, RELU_INNER]) in str(c.tile_ir)
    assert c.check(backend="sim").ok


def test_async_wait_follows_the_tma_stages():
    c = build("relu_matmul_seed", "sm_90", {"015_pipeline_k_outer.enable": False})
    after = str(step(c, "011_tma_copy").after)
    stages = RELU_STAGES.format(kind="TmaBufferedStage", extra="", **RELU_BULK)
    assert "\n".join([RELU_LOOP, stages, RELU_WAIT, RELU_INNER]) in after
    assert "\n".join([stages, RELU_WAIT, RELU_INNER]) in str(c.tile_ir)
    loop = k_loop(c.kernel_ir.kernels[0])
    # the mbarrier wait makes the bulk copies visible to each thread that waits: no barrier
    # after it (the barrier before the copies orders buffer reuse and mbarrier phases)
    assert [type(s).__name__ for s in loop.body][-4:] == ["Barrier", "If", "MbarrierWait", "For"]
    assert c.check(backend="sim").ok
    # a group of TMA and cp.async stages: 011 waits for b_smem, 013 widens that wait
    c = build("matmul_odd", "sm_90", {"015_pipeline_k_outer.enable": False})
    assert "        AsyncWait(b_smem)\n        for a2i" in str(step(c, "011_tma_copy").after)
    text = str(step(c, "013_async_copy").after)
    assert "        AsyncWait(a_smem, b_smem)\n        for a2i" in text and "AsyncWait(b_smem)" not in text
    loop = k_loop(c.kernel_ir.kernels[0])
    assert [type(s).__name__ for s in loop.body][-5:] == ["CpAsyncCommit", "CpAsyncWait", "MbarrierWait",
                                                         "Barrier", "For"]
    assert c.check(backend="sim").ok


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_pipelined_loop_waits_before_its_prefetching_stages(target):
    # execution order: wait for tile ko; issue the copies of tile ko + 1; compute tile ko
    c = build("relu_matmul_seed", target)
    kind = "TmaBufferedStage" if target == "sm_90" else "AsyncBufferedStage"
    stages = RELU_STAGES.format(kind=kind, extra=", prefetch=1", **(RELU_BULK if target == "sm_90" else NO_BULK))
    assert "\n".join([RELU_LOOP, RELU_WAIT, stages, RELU_INNER]) in str(c.tile_ir)
    st = step(c, "015_pipeline_k_outer")
    assert "\n".join([RELU_WAIT, RELU_INNER]) in str(st.before)
    assert str(st.after).count("AsyncWait(") == 1
    head = k_loop(c.kernel_ir.kernels[0]).body
    wait = K.MbarrierWait if target == "sm_90" else K.CpAsyncWait
    # the AsyncWait: the wait, then (cp.async) the barrier (tile ko visible; buffer (ko + 1) % 2
    # free; TMA: the producer waits for the slot's empty mbarrier instead); the stages: the
    # guarded issue of tile ko + 1
    sync = [] if target == "sm_90" else [K.Barrier]
    assert [type(s) for s in head[:4 - (target == "sm_90")]] == [wait] + sync + [K.Comment, K.If]
    assert c.check(backend="sim").ok


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm_waits_for_its_async_row_stage(target):
    c = build("rms_norm_seed", target)
    text = str(c.tile_ir)
    assert ("    x_smem = AsyncStage(x, origin=(0, a0, 0), slab=(a1:2048@2))\n"
            "    AsyncWait(x_smem)\n"
            "    StridedLoop(a1 = a3 * 4; < 2048; += 1024):  # reduce unroll") in text
    assert "AsyncWait" in str(step(c, "013_async_copy").after) and "AsyncWait" not in str(
        step(c, "013_async_copy").before)


def test_an_async_stage_without_async_wait_is_an_error():
    from deplokit.ir.tile_ir import AsyncWait, map_body
    for target, config in [("sm_80", {}), ("sm_90", {"015_pipeline_k_outer.enable": False})]:
        tile = build("relu_matmul_seed", target, config).tile_ir
        dropped = tuple(dataclasses.replace(k, body=map_body(k.body, lambda s: None if isinstance(s, AsyncWait) else s))
                        for k in tile.kernels)
        with pytest.raises(ValueError, match="x_smem, bias_smem, w_smem copied asynchronously, but no AsyncWait"):
            materialize(dataclasses.replace(tile, kernels=dropped))


# -- correctness: the simulator against torch, nvcc -------------------------------------------------

STAGE_PROGRAMS = ["relu_matmul_seed", "matmul_ragged_n", "linear_k_tail", "linear_bias", "matmul_odd",
                  "rms_norm_seed", "matmul_64x256x128"]
VARIANTS = {
    "default": {},
    "no_pipeline": {"015_pipeline_k_outer.enable": False},       # TMA / cp.async, not rotated
    "sync_buffered": ONLY_010,                                    # float4 ping-pong copies
    "no_split": {"012_split_inner_for_swizzle.enable": False},    # TMA rows crossing the end: unsplit, atom copies
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("target", TARGETS)
def test_simulator_matches_torch(target, variant):
    for name in STAGE_PROGRAMS:
        c = build(name, target, VARIANTS[variant])
        result = c.check(backend="sim")
        assert result.ok, (name, result)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_every_pass_matches_torch(target):
    for name in ["relu_matmul_seed", "matmul_ragged_n", "linear_k_tail"]:
        bad = [str(p) for p in build(name, target).check_passes() if not p.result.ok]
        assert not bad, (name, bad)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", TARGETS)
def test_emitted_cuda_compiles(target):
    for variant in ("no_pipeline", "sync_buffered", "no_split"):
        for name in ["relu_matmul_seed", "matmul_ragged_n", "linear_k_tail"]:
            c = build(name, target, VARIANTS[variant])
            found = c.nvcc().stats
            assert all(found[k.name].spills == 0 for k in c.kernel_ir.kernels), (name, variant)


def test_the_race_checker_sees_a_missing_barrier():
    # negative control: drop the steady state's barrier and the simulator reports the race
    c = build("relu_matmul_seed", "sm_80")
    kernel = c.kernel_ir.kernels[0]
    loop = k_loop(kernel)
    broken = dataclasses.replace(loop, body=tuple(s for s in loop.body if not isinstance(s, K.Barrier)))
    body = tuple(broken if s is loop else s for s in kernel.body)
    program = dataclasses.replace(c.kernel_ir, kernels=(dataclasses.replace(kernel, body=body),))
    env = dict(c.values)
    env.update(c._bind(c.example_inputs))
    with pytest.raises(SimulationError, match="race|before its data lands"):
        simulate_program(program, env)


@pytest.mark.parametrize("pad", [1, 4])
def test_padded_tma_rows(pad):
    # 014 may pad a stage after 011 chose TMA: a pad of whole 16-byte units (4 floats) keeps
    # the rows bulk copies (one per row, at the padded stride); a pad of 1 (rows of 17 floats)
    # cannot be a bulk copy: the stage is restamped as 014 does (stage_geometry.restamp),
    # which falls back to cp.async in the same pipelined schedule, and materialize spells it
    from deplokit.ir.tile_ir import map_body
    from deplokit.passes.stage_geometry import restamp, scope_ranges
    c = build("relu_matmul_seed", "sm_90")
    tile = c.tile_ir
    whys = []

    def padded(k):
        t = k.tile()
        ranges = scope_ranges(t, [s for s in t.body if not isinstance(s, Stage)][:1])

        def pad_x(s):
            if isinstance(s, Stage) and s.name == "x_smem":
                s, why = restamp(dataclasses.replace(s, pad=pad), c.tile_ir.types()["x"], ranges)
                whys.append(why)
            return s
        return dataclasses.replace(k, body=map_body(k.body, pad_x))
    program = materialize(TileProgram(tile.buffers, tile.written, tuple(padded(k) for k in tile.kernels),
                                      tile.outputs))
    body = program.kernels[0].body
    tma = {t.array for t in nodes(body, K.TmaLoad)}
    if pad == 4:
        assert tma == {"x_smem", "bias_smem", "w_smem"} and not list(nodes(body, K.CpAsync))
        assert {K.format_expr(t.dst_offset) for t in nodes(body, K.TmaLoad) if t.array == "x_smem"} >= {"(x_smem_r * 20)"}
    else:
        assert tma == {"bias_smem", "w_smem"} and {cp.array for cp in nodes(body, K.CpAsync)} == {"x_smem"}
        assert whys == ["x_smem: cp.async, not TMA: padded shared rows of 17 floats are not 16-byte aligned"]
    env = dict(c.values)
    env.update(c._bind(c.example_inputs))
    (got,) = simulate_program(program, env)
    torch.testing.assert_close(torch.from_numpy(got), c._eager(c.example_inputs), rtol=1e-4, atol=1e-5)
    if nvcc_available():
        from deplokit.passes.lower.cuda import render_program
        from deplokit.runtime.nvcc import compile_cuda
        compile_cuda(render_program(program, 90), "sm_90")


def test_pad_smem_replans_a_padded_tma_stage_inside_the_pass():
    # a configuration the tuner drew: 1x1 register tiles, TMA for the K-chunk slabs, pad 4;
    # 014 pads x0's TMA stage and plans its bulk copies again (it once raised UnboundLocalError)
    config = {"002_chunk_matmul_k.k_chunk": 32, "003_split_matmul_k.splits": 2, "008_register_tile.tm": 1,
              "008_register_tile.tn": 1, "011_tma_copy.max_copies": 32, "014_pad_smem.pad": 4}
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 128, generator=g), torch.randn(128, 512, generator=g)
    c = deplokit.compile(torch.matmul, a, b, target="sm_90", config=config)
    padded = [s for s in c.trace if s.name == "014_pad_smem"][0]
    assert padded.changed
    stages = [s for s, _ in walk(padded.after.kernels[0].tile().body) if isinstance(s, Stage)]
    assert any(s.pad == 4 and s.copy == "tma" and s.tma for s in stages)
    assert c.check(a, b, backend="sim").ok
