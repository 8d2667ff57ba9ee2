"""The one pipeline: a flat tuple of pass records, config checked against their knobs, one
lowering per compile (tuned configs included), an immutable Compilation."""
import pytest
import torch
from torch import nn

import deplokit
import deplokit.compilation
from deplokit.errors import ConfigError, DeplokitError
from deplokit.passes.record import KernelPass, Pass
from deplokit.passes.schedule import SCHEDULE
from deplokit.pipeline import PIPELINE, STAGES
from deplokit.runtime.nvcc import nvcc_available


def _relu():
    return nn.ReLU(), torch.randn(4, 64)


def test_the_pipeline_is_one_flat_tuple_of_pass_records():
    assert all(isinstance(p, (Pass, KernelPass)) for p in PIPELINE)
    names = [p.name for p in PIPELINE]
    assert names[:7] == ["decompose", "lift", "fuse", "fuse_attention", "fuse_rows", "split_reduce", "dedup"]
    assert names[-1] == "render"
    assert names[7:23] == [p.name for p in SCHEDULE] and len(set(names)) == len(names)
    assert STAGES == ("torch", "tensor", "loop", "tile", "kernel", "cuda")


@pytest.mark.parametrize("config, words", [
    ({"005_blockify_launch.block_thread": 128}, ["no knob 'block_thread'", "block_threads in (64, 128"]),
    ({"005_blockify_launch.block_threads": 100}, ["outside its domain", "block_threads", "vector_width"]),
    ({"016_mark_unroll.max_trip": True}, ["outside its domain", "max_trip in (0, 4, 8, 16, 32)"]),
    ({"007_stage_inputs.stage": 1}, ["outside its domain", "stage in (True, False)"]),
    ({"099_warp_specialize.enable": True}, ["no pass named '099_warp_specialize'", "005_blockify_launch"]),
    ({"fuse_rows.enable": "no"}, ["outside its domain", "enable in (True, False)"]),
    ({"fuse.row_fusion": False}, ["fuse has no knob 'row_fusion'", "fuse has no knobs"]),
    ({"relu:fuse_rows.enable": False}, ["runs on the whole program", "fuse_rows.enable"]),
    ({"block_threads": 128}, ["not of the form PASS.KNOB"]),
    ({"rleu:005_blockify_launch.block_threads": 128}, ["no kernel 'rleu'", "its kernels: relu"]),
])
def test_a_config_naming_no_knob_or_value_is_refused_with_the_pass_knobs(config, words):
    fn, x = _relu()
    with pytest.raises(ConfigError) as e:
        deplokit.compile(fn, x, config=config)
    assert isinstance(e.value, DeplokitError)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_valid_configs_reach_their_pass():
    fn, x = _relu()
    c = deplokit.compile(fn, x, config={"relu:005_blockify_launch.block_threads": 64, "fuse_rows.enable": False})
    step = next(s for s in c.trace if s.name == "005_blockify_launch")
    assert dict(step.decision("relu").knobs)["block_threads"] == 64
    c = deplokit.compile(nn.RMSNorm(256), torch.randn(2, 256), config={"004_cooperative_reduce.lanes": 64})
    assert ("004_cooperative_reduce.lanes", 64) in c.tile_ir.kernels[0].knobs     # recorded on the kernel


def test_a_compile_with_tuned_configs_lowers_once(monkeypatch):
    runs, asked = [], []
    real = deplokit.compilation.lower

    def counting(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    def tuned(program, target):
        asked.append([k.name for k in program.kernels])
        return {f"{program.kernels[0].name}:005_blockify_launch.block_threads": 64}

    monkeypatch.setattr(deplokit.compilation, "lower", counting)
    fn, x = _relu()
    c = deplokit.compile(fn, x, tuned=tuned)
    assert len(runs) == 1 and asked == [["relu"]]
    step = next(s for s in c.trace if s.name == "005_blockify_launch")
    assert dict(step.decision("relu").knobs)["block_threads"] == 64
    # the config given wins over a tuned value
    c = deplokit.compile(fn, x, tuned=tuned, config={"005_blockify_launch.block_threads": 128})
    step = next(s for s in c.trace if s.name == "005_blockify_launch")
    assert dict(step.decision("relu").knobs)["block_threads"] == 128 and len(runs) == 2


def test_recompile_builds_a_new_compilation_and_leaves_the_old_one():
    fn, x = _relu()
    c = deplokit.compile(fn, x)
    before = (c.tile_ir, c.kernel_ir, c.cuda, c.trace)
    d = c.recompile({"005_blockify_launch.block_threads": 64})
    assert d is not c and (c.tile_ir, c.kernel_ir, c.cuda, c.trace) == before
    assert d.tile_ir != c.tile_ir and d.torch_ir is c.torch_ir
    assert d.check(backend="sim").ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_nvcc_returns_its_findings_and_changes_nothing():
    fn, x = _relu()
    c = deplokit.compile(fn, x)
    kernel_ir = c.kernel_ir
    found = c.nvcc()
    assert c.kernel_ir is kernel_ir and kernel_ir.kernels[0].registers is None
    assert found.stats["relu"].registers > 0 and found.stats["relu"].spills == 0


def test_skipped_kernels_are_decisions_not_strings():
    c = deplokit.compile(nn.RMSNorm(64), torch.randn(2, 64), target="sm_80")
    tma = next(s for s in c.trace if s.name == "011_tma_copy")
    (d,) = tma.decisions
    assert (d.kernel, d.skipped, d.knobs) == ("merged_rms_norm", "sm_80 has no TMA (bulk copies need sm_90)", ())
    assert tma.remarks == ("merged_rms_norm: sm_80 has no TMA (bulk copies need sm_90)",)
    text = str(tma)
    assert text == "--- t:011_tma_copy skipped: merged_rms_norm: sm_80 has no TMA (bulk copies need sm_90)"


def test_every_scheduling_pass_keeps_a_kernels_locals():
    """Nothing restores what a pass drops: a kernel's on-chip rows (row-fused attention)
    survive every scheduling pass because each pass replaces only what it changes."""
    q = torch.randn(1, 2, 8, 16)
    c = deplokit.compile(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v), q, q, q,
                         config={"fuse_rows.by_cost": False, "fuse_attention.enable": False})
    with_locals = {k.name: k.locals for k in c.loop_ir.kernels if k.locals}
    assert with_locals
    for step in (s for s in c.trace if s.stage == "tile"):
        assert {k.name: k.locals for k in step.after.kernels if k.name in with_locals} == with_locals, step.name


def test_a_kernel_pass_record_gates_flags_and_notes():
    from deplokit.passes.record import Knob, Needs, Noted, flag_knob
    from deplokit.target import get_target
    from deplokit.trace import Context

    c = deplokit.compile(nn.ReLU(), torch.randn(4, 64))

    def apply(kernel, pctx):
        return Noted(kernel, f"saw n={pctx.knobs['n']} on {pctx.target.name}")

    probe = KernelPass("099_probe", "tile", "a probe", apply,
                       (Knob("n", (1, 2), lambda kernel, target: 2), flag_knob("on", "probe", "probing")),
                       needs=(Needs("tma", "TMA (sm_90+)"),))
    step = probe.run(c.tile_ir, Context(get_target("sm_90")))
    (d,) = step.decisions
    assert (d.kernel, d.knobs, d.skipped, d.note) == ("relu", (("n", 2), ("on", True)), "", "saw n=2 on sm_90")
    assert step.after.kernels[0].knobs[-2:] == (("099_probe.n", 2), ("099_probe.on", True))
    assert step.remarks == ("relu: saw n=2 on sm_90",)
    assert probe.run(c.tile_ir, Context(get_target("sm_80"))).skipped_reason == "relu: sm_80 has no TMA (sm_90+)"
    off = probe.run(c.tile_ir, Context(get_target("sm_90"), {"relu:099_probe.on": False}))
    assert off.skipped_reason == "relu: probing disabled by the knob" and off.after == c.tile_ir


def test_a_pass_of_ones_own_runs_after_the_sixteen_and_is_checked():
    """compile(passes=...): the exercise of notebook 02; the pass is a trace step like the others."""
    import torch

    import deplokit
    from deplokit.errors import ConfigError
    from deplokit.ir.tile_ir import Tile, map_body
    from deplokit.passes.record import KernelPass, Skip, replace_tile
    from deplokit.passes.schedule import SCHEDULE

    def unroll_strided(kernel, pctx):
        from deplokit.ir.tile_ir import StridedLoop
        marked = []

        def mark(s):
            if isinstance(s, StridedLoop) and not s.unroll:
                marked.append(s.var)
                return StridedLoop(s.var, s.start, s.stop, s.step, s.kind, s.body, s.role, True)
            return s
        tile = kernel.tile()
        body = map_body(tile.body, mark)
        return replace_tile(kernel, Tile(tile.axes, body)) if marked else Skip("no strided loop left to unroll")

    mine = KernelPass("017_unroll_strided", "tile", "unroll every strided loop", unroll_strided)
    torch.manual_seed(0)
    c = deplokit.compile(torch.nn.RMSNorm(300), torch.randn(5, 300), passes=[mine],
                         config={"016_mark_unroll.max_trip": 0})
    names = [s.name for s in c.trace if s.stage == "tile"]
    assert names == [p.name for p in SCHEDULE] + ["017_unroll_strided"]
    step = next(s for s in c.trace if s.name == "017_unroll_strided")
    assert step.changed and "unroll" in str(c.tile_ir)
    assert all(check.result.ok for check in c.check_passes())
    assert "017_unroll_strided" in [s.name for s in c.recompile({}).trace]        # recompile keeps it
    with pytest.raises(ConfigError, match="already in the pipeline"):
        deplokit.compile(torch.nn.RMSNorm(300), torch.randn(5, 300), passes=[SCHEDULE[0]])
    with pytest.raises(ConfigError, match="KernelPass of stage 'tile'"):
        deplokit.compile(torch.nn.RMSNorm(300), torch.randn(5, 300), passes=[unroll_strided])
