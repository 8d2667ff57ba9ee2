"""The IR verifier (deplokit/passes/verify.py): the IR the pipeline makes keeps every
invariant, and IR broken in each way is caught, naming the invariant it breaks."""
import dataclasses

import numpy as np
import pytest
import torch
from programs import config_of, corpus

import deplokit
from deplokit.errors import DeplokitError
from deplokit.ir import kernel_ir as K
from deplokit.ir.index import var
from deplokit.ir.kernel_cp_async import CpAsync
from deplokit.ir.loop_ir import Load, Loop, Store
from deplokit.ir.tile_ir import Stage, StridedLoop, TmaBox, map_body
from deplokit.passes.lower.materialize import materialize
from deplokit.passes.verify import IRInvariantError, verify
from deplokit.target import get_target

PROGRAMS = corpus()
H100 = get_target("sm_90")


def pointwise():
    return deplokit.compile(lambda x: x * 2 + 1, torch.randn(64, 1024))


def matmul(**config):
    fn, inputs = PROGRAMS["matmul_64x256x128"]
    return deplokit.compile(fn, *inputs, config={**config_of(PROGRAMS["matmul_64x256x128"]), **config})


def with_kernel(program, kernel):
    return dataclasses.replace(program, kernels=(kernel,) + program.kernels[1:])


def rewrite(program, fn):
    """The program with fn applied to every statement of its first kernel."""
    k = program.kernels[0]
    return with_kernel(program, dataclasses.replace(k, body=map_body(k.body, fn)))


def caught(ir, invariant, target=None):
    with pytest.raises(IRInvariantError) as e:
        verify(ir, target)
    assert e.value.invariant == invariant and isinstance(e.value, DeplokitError)
    assert invariant in str(e.value)
    return e.value


@pytest.mark.parametrize("name", ["rms_norm_seed", "relu_matmul_seed", "softmax_odd", "matmul_64x256x128",
                                  "sdpa_tinyllama_seq128", "linear_bias"])
def test_every_scheduling_step_and_its_lowering_keep_the_invariants(name):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, config=config_of(PROGRAMS[name]))
    for step in c.trace:
        if step.stage == "tile":
            verify(step.after, c.target)
            verify(materialize(step.after))
    verify(c.kernel_ir, c.target)


def test_a_value_read_before_it_is_computed():
    broken = rewrite(pointwise().tile_ir, lambda s: None if isinstance(s, Load) else s)
    assert "in0 is read before it is defined" in str(caught(broken, "names-declared"))


def test_an_index_variable_outside_its_loop():
    def rename(s):
        return dataclasses.replace(s, var="a9v") if isinstance(s, Loop) and s.kind == "vector" else s
    assert "a1v is no tile axis or enclosing loop" in str(caught(rewrite(pointwise().tile_ir, rename),
                                                                  "loop-vars-bound"))


def test_a_float4_stamp_the_index_no_longer_allows():
    def shift(s):         # one float further: the 4 elements are no longer 16-byte aligned
        if isinstance(s, Load):
            return dataclasses.replace(s, index=(s.index[0], s.index[1] + 1))
        return s
    assert "not a multiple of 4" in str(caught(rewrite(pointwise().tile_ir, shift), "vector-width"))


def test_a_float4_stamp_outside_a_vector_loop():
    def unwrap(s):
        return s.body if isinstance(s, Loop) and s.kind == "vector" else s
    caught(rewrite(pointwise().tile_ir, unwrap), "loop-vars-bound")    # a1v unbound comes first

    def plain(s):
        return dataclasses.replace(s, kind="free") if isinstance(s, Loop) and s.kind == "vector" else s
    caught(rewrite(pointwise().tile_ir, plain), "vector-width")


def test_the_stamped_widths_are_what_the_lowering_spells():
    c = pointwise()
    stamped = [s for s in c.tile_ir.kernels[0].tile().body[0].body if isinstance(s, (Load, Store))]
    assert [s.width for s in stamped] == [4, 4]
    kinds = [type(s).__name__ for s in K.walk_stmts(c.kernel_ir.kernels[0].body)
             if isinstance(s, (K.VectorLoad, K.VectorStore))]
    assert kinds == ["VectorLoad", "VectorStore"]
    # the same program with the stamps removed is spelled lane by lane
    scalar = rewrite(c.tile_ir, lambda s: dataclasses.replace(s, width=1) if isinstance(s, (Load, Store)) else s)
    lowered = materialize(scalar)
    assert not [s for s in K.walk_stmts(lowered.kernels[0].body) if isinstance(s, (K.VectorLoad, K.VectorStore))]


def test_stages_larger_than_shared_memory():
    c = matmul(**{"003_split_matmul_k.splits": 1})

    def grow(s):
        if isinstance(s, Stage):       # (a TMA box of 4096 rows is no box: copied by cp.async here)
            copy = "async" if s.copy == "tma" else s.copy
            return dataclasses.replace(s, slab=(dataclasses.replace(s.slab[0], extent=4096),) + s.slab[1:],
                                       copy=copy, tma=None)
        return s
    caught(rewrite(c.tile_ir, grow), "stage-smem", H100)


def test_the_tma_stamp_is_the_box_the_stage_is():
    fn, inputs = PROGRAMS["relu_matmul_seed"]
    # the 16 x 16 block, the one the stamps below describe
    c = deplokit.compile(fn, *inputs, target="sm_90", config={"005_blockify_launch.thread_shape": "16x16"})
    tile = c.tile_ir
    stamps = {s.name: s.tma for s in all_stages(tile) if s.copy == "tma"}
    assert stamps == {"x_smem": TmaBox((16, 16)), "w_smem": TmaBox((16, 16))}     # reads conflict free: unswizzled
    assert "swizzle=" not in str(tile) and "tmap=16x16" in str(tile)
    # the lowering spells the stamp: w's tensor map has that box and swizzle
    assert {(t.buffer, t.box, t.swizzle) for t in c.kernel_ir.kernels[0].tensor_maps} == \
        {("x", (16, 16), 0), ("w", (16, 16), 0)}

    def stamp(fn_):
        return rewrite(tile, lambda s: fn_(s) if isinstance(s, Stage) and s.name == "w_smem" else s)
    # a box that disagrees with the slab
    assert "w_smem is stamped with tmap=8x16, but its slab is tmap=16x16" in str(caught(
        stamp(lambda s: dataclasses.replace(s, tma=TmaBox((8, 16)))), "tma-stamp"))
    # a swizzle the box's 64-byte rows do not allow
    assert "allows 64 swizzle" in str(caught(stamp(lambda s: dataclasses.replace(s, tma=TmaBox((16, 16), 128))),
                                             "tma-stamp"))
    # a pad changed after the stamp: a box lands unpadded
    caught(stamp(lambda s: dataclasses.replace(s, pad=4)), "tma-stamp")
    # a TMA stage without a stamp, and a cp.async stage with one
    caught(stamp(lambda s: dataclasses.replace(s, tma=None)), "tma-stamp")
    caught(stamp(lambda s: dataclasses.replace(s, copy="async")), "tma-stamp")


def test_the_copy_unit_is_stamped_and_read():
    # 007 stamps how the threads copy a stage (013 restamps it for cp.async): relu_matmul's
    # three stages have 16-byte aligned rows, 16-byte cp.async each
    fn, inputs = PROGRAMS["relu_matmul_seed"]
    c = deplokit.compile(fn, *inputs, target="sm_80")
    tile = c.tile_ir
    assert {(s.name, s.copy, s.unit) for s in all_stages(tile)} == \
        {("x_smem", "async", 4), ("bias_smem", "async", 4), ("w_smem", "async", 4)}

    def stamp(fn_):
        return rewrite(tile, lambda s: fn_(s) if isinstance(s, Stage) and s.name == "x_smem" else s)

    def cp_bytes(program, array):
        return {x.nbytes for x in K.walk_stmts(materialize(program).kernels[0].body)
                if isinstance(x, CpAsync) and x.array == array}
    assert cp_bytes(tile, "x_smem") == {16}
    # the lowering spells the stamp, it does not re-derive it: a scalar stamp, 4-byte copies
    scalar = stamp(lambda s: dataclasses.replace(s, unit=1))
    assert cp_bytes(scalar, "x_smem") == {4}
    assert "x_smem is stamped to copy units of 1 floats, but its rows, pad and copy kind give 4" in \
        str(caught(scalar, "copy-unit"))
    # a pad of 1 changed without restamping: a 16-byte cp.async into rows of 17 floats
    caught(stamp(lambda s: dataclasses.replace(s, pad=1)), "copy-unit")
    # restamped as 014 does, the same stage copies 4-byte units and verifies
    from deplokit.passes.stage_geometry import restamp, scope_ranges
    k = tile.kernels[0]
    ranges = scope_ranges(k.tile(), [s for s in k.tile().body if isinstance(s, Loop)][:1])
    padded = stamp(lambda s: restamp(dataclasses.replace(s, pad=1), tile.types()["x"], ranges)[0])
    verify(padded, H100)
    assert cp_bytes(padded, "x_smem") == {4}


def test_the_shared_float4_read_is_stamped_with_the_stage_and_read():
    # a vector loop's loads from RMSNorm's staged row are one aligned shared float4 each,
    # decided in the schedule with the stage's copy (Load.shared_width), not in the lowering
    from deplokit.ir.index import Affine, FloorDiv, Mod
    from deplokit.ir.tile_ir import SlabAxis
    from deplokit.passes.stage_geometry import restamp, restamp_loads
    fn, inputs = PROGRAMS["rms_norm_seed"]
    c = deplokit.compile(fn, *inputs, target="sm_80")
    tile = c.tile_ir
    staged = [s for s in all_loads(tile) if s.tensor == "x_smem"]
    assert [s.shared_width for s in staged] == [4, 4]
    assert all(s.shared_width == 1 for s in all_loads(tile) if s.tensor != "x_smem")

    def shared_reads(program):
        return [x for x in K.walk_stmts(materialize(program).kernels[0].body)
                if isinstance(x, K.VectorLoad) and x.space == "shared"]
    assert len(shared_reads(tile)) == 2
    # the lowering spells the stamp, it does not re-derive it: stamped 1, read lane by lane
    scalar = rewrite(tile, lambda s: dataclasses.replace(s, shared_width=1) if isinstance(s, Load)
                     and s.tensor == "x_smem" else s)
    assert not shared_reads(scalar)
    assert "in0 = load x_smem[a1 + a1v]: stamped to read 1 floats of shared memory at once, but its stage's " \
           "slab, pad and buffers give 4" in str(caught(scalar, "shared-width"))
    # a pass that splits the row into atoms of 4 (as 012 does) and restamps the stage but
    # not its loads is caught: the split slab is read lane by lane
    k = tile.kernels[0]
    ranges = {a.var: a.extent for a in k.tile().axes}

    def split(s):
        if isinstance(s, Stage):
            last = s.slab[-1]
            slab = (SlabAxis(f"{last.var}o", last.extent // 4, last.dim), SlabAxis(f"{last.var}i", 4, last.dim))
            return restamp(dataclasses.replace(s, slab=slab), tile.types()["x"], ranges)[0]
        if isinstance(s, Load) and s.tensor == "x_smem":
            e = s.index[-1]
            return dataclasses.replace(s, index=(Affine(((FloorDiv(e, 4), 1),)), Affine(((Mod(e, 4), 1),))))
        return s
    stale = rewrite(tile, split)
    caught(stale, "shared-width")
    fixed = with_kernel(tile, restamp_loads(stale.kernels[0]))
    verify(fixed, c.target)
    assert [s.shared_width for s in all_loads(fixed) if s.tensor == "x_smem"] == [1, 1]
    assert not shared_reads(fixed)
    from deplokit.runtime.sim import simulate_program
    env = dict(c.values)
    env.update(c._bind(inputs))
    assert np.array_equal(simulate_program(materialize(fixed), env)[0], simulate_program(materialize(tile), env)[0])
    # a stamp outside a vector loop, or on a load from a global tensor, is caught too
    caught(rewrite(tile, lambda s: dataclasses.replace(s, shared_width=4) if isinstance(s, Load)
                   and s.tensor == "p_weight" else s), "shared-width")


def all_loads(tile):
    from deplokit.ir.tile_ir import walk
    return [s for k in tile.kernels for s, _ in walk(k.body) if isinstance(s, Load)]


def all_stages(tile):
    from deplokit.ir.tile_ir import walk
    return [s for k in tile.kernels for s, _ in walk(k.body) if isinstance(s, Stage)]


def test_register_tile_shapes_are_stamped_and_read():
    c = matmul(**{"003_split_matmul_k.splits": 1, "008_register_tile.tm": 2, "008_register_tile.tn": 4})
    k = c.tile_ir.kernels[0]
    assert [(r.acc, r.shape) for r in k.register_tiles] == [("acc0", (2, 4))]
    assert "register acc0[2, 4]" in str(k)
    caught(with_kernel(c.tile_ir, dataclasses.replace(k, register_tiles=())), "register-tiles")
    wrong = dataclasses.replace(k, register_tiles=(dataclasses.replace(k.register_tiles[0], shape=(4, 2)),))
    caught(with_kernel(c.tile_ir, wrong), "register-tiles")


def test_split_k_kernel_is_followed_by_its_reducer_and_writes_a_declared_workspace():
    c = matmul(**{"003_split_matmul_k.splits": 4, "003_split_matmul_k.reduce": "reducer"})
    k, red = c.tile_ir.kernels
    assert k.split_k.splits == 4 and k.split_k.reducer == red.name and red.reduces_for == k.name
    assert k.outputs == (k.split_k.workspace,)
    caught(dataclasses.replace(c.tile_ir, kernels=(k,)), "split-k")
    caught(dataclasses.replace(c.tile_ir, kernels=(k, dataclasses.replace(red, reduces_for=""))), "split-k")
    ghost = dataclasses.replace(k.split_k, workspace="nowhere")
    caught(with_kernel(c.tile_ir, dataclasses.replace(k, split_k=ghost)), "split-k")
    main_f, red_f = c.kernel_ir.kernels
    assert red_f.reduces_for == main_f.name
    # reduced in the kernel: its counter declared as int32 and the output among its writes
    c = matmul(**{"003_split_matmul_k.splits": 4, "003_split_matmul_k.reduce": "in_kernel"})
    (k,) = c.tile_ir.kernels
    assert k.split_k.in_kernel and k.outputs[0] == k.split_k.workspace and len(k.outputs) == 2
    no_counter = dataclasses.replace(c.tile_ir, written=tuple(b for b in c.tile_ir.written
                                                              if b.name != k.split_k.counter))
    caught(no_counter, "split-k")


def _func(body, params=("out",)):
    return K.KernelFunc("k", tuple(K.Param(p, const=False, size=64) for p in params), (1, 1, 1), (64, 1, 1),
                        tuple(body))


def _program(*funcs):
    return K.KernelProgram((), (), funcs, ())


def test_kernel_ir_names_declared_before_use():
    tid = K.Special("tid.x")
    ok = [K.Declare("i", "int", tid), K.GlobalStore("out", K.Var("i"), K.Const(1.0))]
    verify(_program(_func(ok)))
    caught(_program(_func(ok[1:])), "names-declared")
    caught(_program(_func([K.GlobalStore("nowhere", tid, K.Const(1.0))])), "names-declared")
    caught(_program(_func([K.SharedStore("s", tid, K.Const(1.0))])), "names-declared")
    scoped = [K.If(K.Binary("<", tid, K.Const(3, "int")), (K.Declare("i", "int", tid),)),
              K.GlobalStore("out", K.Var("i"), K.Const(1.0))]      # i lives only inside the branch
    caught(_program(_func(scoped)), "names-declared")


def test_kernel_ir_barrier_in_divergent_code():
    tid = K.Special("tid.x")
    uniform = K.For("k", K.Const(0, "int"), K.Const(4, "int"), K.Const(1, "int"), (K.Barrier(),))
    verify(_program(_func([uniform])))
    caught(_program(_func([K.If(K.Binary("<", tid, K.Const(32, "int")), (K.Barrier(),))])), "uniform-barriers")
    strided = K.For("k", tid, K.Const(100, "int"), K.Const(64, "int"), (K.Barrier(),))   # trip count per thread
    caught(_program(_func([strided])), "uniform-barriers")
    via_var = [K.Declare("t", "int", K.Binary("+", tid, K.Const(1, "int"))),
               K.If(K.Binary("==", K.Var("t"), K.Const(1, "int")), (K.Barrier(),))]
    caught(_program(_func(via_var)), "uniform-barriers")


def test_kernel_ir_static_shared_memory_of_the_target():
    big = _program(_func([K.SharedArray("s", 13000)]))
    verify(big)                                 # no target: materialised before blockify, simulator only
    caught(big, "static-smem", H100)


def test_check_passes_verifies_each_step():
    c = pointwise()
    broken = rewrite(c.tile_ir, lambda s: None if isinstance(s, Load) else s)
    steps = tuple(dataclasses.replace(s, after=broken, skipped_reason="") if s.name == "016_mark_unroll" else s
                  for s in c.trace)
    object.__setattr__(c, "trace", steps)      # a frozen Compilation, broken on purpose past its guard
    with pytest.raises(IRInvariantError):
        c.check_passes()


def test_a_local_read_across_its_rows():
    # a row-fused attention keeps one row of the probabilities on chip (a local); a load that
    # walks its row dim with a loop reads rows that are not there (fuse_rows' bug at S = D)
    q, k, v = (torch.randn(1, 1, 3, 5) for _ in range(3))
    c = deplokit.compile(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v), q, k, v,
                         config={"fuse_attention.enable": False, "fuse_rows.by_cost": False})
    (kern,) = [k for k in c.tile_ir.kernels if k.locals]
    verify(c.tile_ir, c.target)
    local = kern.locals[-1]
    row = next(d for d in range(local.type.rank) if d not in local.row_dims and local.type.shape[d] > 1)

    def across(body, loop_var=None):
        out = []
        for s in body:
            if isinstance(s, (Loop, StridedLoop)):
                s = dataclasses.replace(s, body=across(s.body, s.var))
            elif isinstance(s, Load) and s.tensor == local.name and loop_var is not None:
                s = dataclasses.replace(s, index=s.index[:row] + (var(loop_var),) + s.index[row + 1:])
            out.append(s)
        return tuple(out)
    tile = kern.tile()
    broken = dataclasses.replace(kern, body=tuple(dataclasses.replace(tile, body=across(tile.body))
                                                  if s is tile else s for s in kern.body))
    assert broken != kern
    program = dataclasses.replace(c.tile_ir, kernels=tuple(broken if k is kern else k for k in c.tile_ir.kernels))
    assert f"of the local {local.name} is not its row's" in str(caught(program, "local-rows"))
