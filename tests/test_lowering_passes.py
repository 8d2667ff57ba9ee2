"""The Tile -> Kernel lowering as numbered passes (deplokit/passes/lower/kNNN_*.py): each is a
traced step with its own diff, and each hands the next one public data on the IR."""
import re

import torch
from programs import config_of, corpus

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_ir import StageCopy, StagePrologue, StageWait
from deplokit.passes.lower import LOWERING
from deplokit.passes.record import Noted, Pass
from deplokit.runtime.launches import functions_by_kernel, launch_sequence
from deplokit.trace import Context

PROGRAMS = corpus()


def compiled(name, **config):
    fn, inputs = PROGRAMS[name]
    return deplokit.compile(fn, *inputs, config={**config_of(PROGRAMS[name]), **config})


def step(c, name):
    return next(s for s in c.trace if s.stage == "kernel" and s.name == name)


def pending(program):
    return [s for k in program.kernels for s in K.walk_stmts(k.body)
            if isinstance(s, (StageCopy, StageWait, StagePrologue))]


def test_the_lowering_passes_in_order_each_traced():
    names = ["001_materialize", "002_stage_copies", "003_unclash_names", "004_reconverge_warps"]
    assert [p.name for p in LOWERING] == names
    c = compiled("relu_matmul_seed")
    kernel_steps = [s for s in c.trace if s.stage == "kernel"]
    assert [s.name for s in kernel_steps] == names
    assert kernel_steps[0].before is c.tile_ir and kernel_steps[-1].after is c.kernel_ir
    for a, b in zip(kernel_steps, kernel_steps[1:]):
        assert b.before is a.after


def test_materialize_leaves_stages_to_the_stage_copy_pass():
    c = compiled("matmul_64x256x128", **{"003_split_matmul_k.splits": 1})
    materialized = step(c, "001_materialize").after
    left = pending(materialized)
    assert {type(s) for s in left} == {StageCopy, StageWait, StagePrologue}
    assert {s.stage.name for s in left if isinstance(s, StageCopy)} == {"a_smem", "b_smem"}
    assert "stage prologue of K loop a2o" in str(materialized)
    copied = step(c, "002_stage_copies")
    assert copied.changed and not pending(copied.after)
    arrays = {s.name for k in copied.after.kernels for s in K.walk_stmts(k.body) if isinstance(s, K.SharedArray)}
    assert {"a_smem", "b_smem"} <= arrays
    # the -vv diff of the pass shows the pending lines replaced by the copies
    text = str(copied)
    assert "-stage prologue of K loop a2o" in text and re.search(r"^\+\s*barrier$", text, re.M)


def test_a_kernel_without_stages_is_left_alone_by_the_stage_copy_pass():
    c = deplokit.compile(lambda x: x * 2 + 1, torch.randn(64, 1024))
    assert not step(c, "002_stage_copies").changed



def test_a_pass_that_changes_nothing_is_a_skip_with_its_reason():
    c = compiled("relu_matmul_seed")
    assert "no kernel-local meets a parameter's name" in step(c, "003_unclash_names").skipped_reason
    assert "before a warp shuffle" in step(c, "004_reconverge_warps").skipped_reason
    # any whole-program pass that returns its input is a skip, with its notes as the reason
    same = Pass("same", "kernel", "returns its input", lambda ir, pctx: ir).run(c.kernel_ir, Context(c.target))
    assert same.skipped_reason == "same found nothing to change" and same.after is c.kernel_ir and not same.changed
    noted = Pass("noted", "kernel", "", lambda ir, pctx: Noted(ir, ("nothing to rename",))).run(c.kernel_ir,
                                                                                                Context(c.target))
    assert noted.skipped_reason == "nothing to rename"

def test_split_k_reducer_names_its_kernel_and_launches_read_it():
    c = compiled("matmul_small_m_long_k", **{"003_split_matmul_k.reduce": "reducer"})
    red = [k for k in c.kernel_ir.kernels if k.reduces_for]
    assert red and all(r.reduces_for in {k.name for k in c.kernel_ir.kernels} for r in red)
    assert "# adds up the split-K partial sums of " in str(c.kernel_ir)
    assert c.check(backend="sim").ok


def test_launches_follow_the_stamped_owner_not_the_position():
    owner = K.KernelFunc("b", (), (1, 1, 1), (1, 1, 1), ())
    other = K.KernelFunc("a", (), (1, 1, 1), (1, 1, 1), ())
    pad = K.KernelFunc("b_repack", (), (1, 1, 1), (1, 1, 1), (), repacks_for="b")
    program = K.KernelProgram((), (), (pad, other, owner), ())    # b's repack kernel placed before a
    funcs = functions_by_kernel(program, {"a", "b"})
    assert [f.name for f in funcs["a"]] == ["a"] and [f.name for f in funcs["b"]] == ["b_repack", "b"]
    assert [f.name for f, _ in launch_sequence(program)] == ["b_repack", "a", "b"]
    # a split-K reducer runs right after each launch of its kernel, whatever its position
    red = K.KernelFunc("b_reduce", (), (1, 1, 1), (1, 1, 1), (), reduces_for="b")
    funcs = functions_by_kernel(K.KernelProgram((), (), (red, other, owner), ()), {"a", "b"})
    assert [f.name for f in funcs["b"]] == ["b", "b_reduce"]
