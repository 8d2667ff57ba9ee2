"""128-bit global accesses: 005 blockify_launch's vector_width, the vector loop in Tile IR,
float4 VectorLoad/VectorStore in Kernel IR and CUDA, used only where alignment, bounds and
unit stride allow, the fallback recorded in the trace, and the simulator's checks."""
import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.index import const, var
from deplokit.ir.kernel_ir import KernelProgram
from deplokit.ir.loop_ir import Load, Loop
from deplokit.ir.tile_ir import SlabAxis, Stage, StridedLoop, walk
from deplokit.passes.vector_geometry import shared_width
from deplokit.runtime.sim import SimulationError, simulate_program

SCALAR = {"005_blockify_launch.vector_width": 1}


def _vector_loops(c):
    return [s for k in c.tile_ir.kernels for s, _ in walk(k.body) if isinstance(s, Loop) and s.kind == "vector"]


def _kernel_stmts(c):
    def rec(body):
        for s in body:
            yield s
            for child in ("body", "then", "orelse"):
                yield from rec(getattr(s, child, ()))
    return [s for k in c.kernel_ir.kernels for s in rec(k.body)]


def _vector_accesses(c, space="global"):
    return [s for s in _kernel_stmts(c) if isinstance(s, (K.VectorLoad, K.VectorStore)) and s.space == space]


def _notes(c):
    step = next(s for s in c.trace if s.name == "005_blockify_launch")
    return [d.note for d in step.decisions if "vector_width" in d.note]


def test_pointwise_moves_four_elements_per_thread_with_float4():
    x = torch.randn(64, 256)
    c = deplokit.compile(lambda x: x * 2 + 1, x)
    assert str(c.tile_ir) == """\
=== merged_add -> add ===
Tile(axes=(a0t:4=THREAD, a1t:64=THREAD, a0b:16=BLOCK)):
    for a1v in 0..4:  # vector
        in0 = load x[a0b * 4 + a0t, a1t * 4 + a1v]  # float4
        v0 = multiply(in0, 2)
        v1 = add(v0, 1)
        add[a0b * 4 + a0t, a1t * 4 + a1v] = v1  # float4"""
    loads = [s for s in _vector_accesses(c) if isinstance(s, K.VectorLoad)]
    stores = [s for s in _vector_accesses(c) if isinstance(s, K.VectorStore)]
    assert len(loads) == 1 and len(stores) == 1
    assert loads[0].dsts == ("in0_x", "in0_y", "in0_z", "in0_w")
    cuda = str(c.cuda)
    assert "*reinterpret_cast<const float4*>(&x[" in cuda and "*reinterpret_cast<float4*>(&add[" in cuda
    assert "make_float4(v1_x, v1_y, v1_z, v1_w)" in cuda
    assert c.check(backend="sim").ok
    assert not _notes(c)


def test_large_pointwise_splits_the_innermost_axis_into_blocks_of_runs():
    c = deplokit.compile(lambda x: x * 2 + 1, torch.randn(4096, 4096))
    tile = c.tile_ir.kernels[0].tile()
    assert [str(a) for a in tile.axes] == ["a1t:256=THREAD", "a0:4096=BLOCK", "a1b:4=BLOCK"]
    assert "in0 = load x[a0, a1b * 1024 + a1t * 4 + a1v]" in str(c.tile_ir)
    assert c.kernel_ir.kernels[0].grid == (16384, 1, 1)         # 4x fewer blocks than scalar
    scalar = deplokit.compile(lambda x: x * 2 + 1, torch.randn(4096, 4096), config=SCALAR)
    assert scalar.kernel_ir.kernels[0].grid == (65536, 1, 1)


@pytest.mark.parametrize("shape", [(5, 37), (3, 129), (2, 7, 37)])
def test_innermost_extent_not_a_multiple_of_4_stays_scalar_and_says_why(shape):
    c = deplokit.compile(lambda x: torch.sigmoid(x) * 3, torch.randn(*shape))
    assert not _vector_loops(c) and not _vector_accesses(c)
    assert "float4" not in str(c.cuda)
    (note,) = _notes(c)
    assert f"of {shape[-1]} is not a multiple of 4" in note
    assert c.check(backend="sim").ok


@pytest.mark.parametrize("start", [1, 2, 3])
def test_odd_slice_offsets_stay_scalar(start):
    c = deplokit.compile(lambda x: x[:, start:start + 32] * 2, torch.randn(8, 36))
    assert "float4" not in str(c.cuda)
    (note,) = _notes(c)
    assert f"offset {start} is not a multiple of 4 floats" in note
    assert c.check(backend="sim").ok


def test_aligned_slice_offset_uses_float4():
    c = deplokit.compile(lambda x: x[:, 8:40] * 2, torch.randn(8, 44))
    assert "in0 = load x[a0, a1t * 4 + a1v + 8]" in str(c.tile_ir)
    assert len(_vector_accesses(c)) == 2
    assert c.check(backend="sim").ok


def test_rows_of_unaligned_stride_stay_scalar():
    # the slice is aligned within a row, but rows of 38 floats start off 16-byte boundaries
    c = deplokit.compile(lambda x: x[:, :32] + 1, torch.randn(8, 38))
    assert "float4" not in str(c.cuda)
    assert "last dimension of 38 is not a multiple of 4" in _notes(c)[0]
    assert c.check(backend="sim").ok


def test_transposed_access_is_not_unit_stride():
    c = deplokit.compile(lambda x: x.t() + 1, torch.randn(32, 64))
    assert "float4" not in str(c.cuda)
    assert "not the contiguous last one" in _notes(c)[0]
    assert c.check(backend="sim").ok


def test_bool_input_is_not_moved_with_float4():
    c = deplokit.compile(lambda m, x: torch.where(m, x, 0.0), torch.randn(8, 64) > 0, torch.randn(8, 64))
    assert "bool elements, float4 moves float32" in _notes(c)[0]
    assert c.check(backend="sim").ok


def test_knob_turns_vectorisation_off():
    fn = lambda a, b: F.silu(a) * b                      # noqa: E731  (SwiGLU)
    inputs = (torch.randn(2, 8, 128), torch.randn(2, 8, 128))
    vec = deplokit.compile(fn, *inputs)
    scalar = deplokit.compile(fn, *inputs, config=SCALAR)
    assert _vector_loops(vec) and len(_vector_accesses(vec)) == 3
    assert not _vector_loops(scalar) and "float4" not in str(scalar.cuda) and not _notes(scalar)
    assert dict(dict(next(s for s in vec.trace if s.name == "005_blockify_launch").params)["merged_mul"])[
        "vector_width"] == 4
    assert torch.equal(vec.run(*inputs, backend="sim"), scalar.run(*inputs, backend="sim"))
    with pytest.raises(deplokit.DeplokitError, match="outside its domain"):
        deplokit.compile(fn, *inputs, config={"005_blockify_launch.vector_width": 2})


def test_masked_tail_guards_whole_runs():
    # rows of 4100 = 1025 runs of 4 over blocks of 256 threads: the 5th block of a row has one
    # run inside, the rest wholly outside; one guard per run, a clamp that stays aligned
    c = deplokit.compile(lambda x: x * 3 - 1, torch.randn(3, 4100))
    kernel = str(c.kernel_ir)
    base = "((a1b * 1024) + (a1t * 4))"
    assert f"global float4 x[((a0 * 4100) + min({base}, 4096))]" in kernel
    assert f"in0_x = select(({base} < 4100), in0_x, 0)" in kernel
    assert f"if ({base} < 4100):" in kernel and f"global float4 sub[((a0 * 4100) + {base})]" in kernel
    assert c.check(backend="sim").ok
    # 1000 = 250 runs: one block of 250 threads, nothing to mask
    c = deplokit.compile(lambda x, y: torch.sigmoid(x) * y + 1.0, torch.randn(1000), torch.randn(1000))
    assert c.kernel_ir.kernels[0].block == (250, 1, 1) and "if " not in str(c.kernel_ir)
    assert c.check(backend="sim").ok


def test_row_kernel_free_phase_reads_shared_and_writes_global_float4():
    c = deplokit.compile(nn.RMSNorm(256, eps=1e-6), torch.randn(4, 256))
    tile = c.tile_ir.kernels[0].tile()
    (free,) = [s for s in tile.body if isinstance(s, StridedLoop) and s.kind == "free"]
    assert str(free.start) == "a3 * 4" and free.step == 4 * tile.axes[0].extent
    assert isinstance(free.body[0], Loop) and free.body[0].kind == "vector"
    spaces = sorted((type(s).__name__, s.space) for s in _kernel_stmts(c)
                    if isinstance(s, (K.VectorLoad, K.VectorStore)))
    # x from its staged row (shared), p_weight from global, the output to global
    assert ("VectorLoad", "global") in spaces and ("VectorLoad", "shared") in spaces
    assert ("VectorStore", "global") in spaces
    assert all(p.result.ok for p in c.check_passes())


def test_long_rows_vectorise_their_chunked_head_and_tail():
    # one block per row (split_reduce would spread two rows over many blocks)
    c = deplokit.compile(nn.Softmax(dim=-1), torch.randn(2, 16392), config={"split_reduce.splits": 1})
    tile = c.tile_ir.kernels[0].tile()
    free = [s for s in tile.body if isinstance(s, StridedLoop) and s.kind == "free"]
    assert len(free) == 2 and all(isinstance(s.body[0], Loop) and s.body[0].kind == "vector" for s in free)
    assert c.check(backend="sim").ok


def test_shared_float4_rule_follows_the_slab_pad_and_buffers():
    # the schedule's rule (stamped as Load.shared_width): 4 lanes of one padded shared row,
    # 16-byte aligned, for every value of the other index components
    stage = Stage("x_smem", "x", (const(0), const(0)), (SlabAxis("r", 6, 0), SlabAxis("c", 64, 1)))
    row, col = Load("in0", "x_smem", (var("r"), var("c") * 4 + var("cv"))), var("c") * 4 + var("cv")
    assert shared_width(row, stage, "cv") == 4
    padded = dataclasses.replace(stage, pad=1)                # rows of 65 floats: row r starts at 65 r
    assert shared_width(row, padded, "cv") == 1
    assert shared_width(Load("in0", "x_smem", (var("r") * 4, col)), padded, "cv") == 4
    assert shared_width(Load("in0", "x_smem", (var("q"), col)), padded, "cv", {"q"}) == 4   # q steps by 4
    assert shared_width(Load("in0", "x_smem", (var("r"), col + 2)), stage, "cv") == 1       # off by 2 floats
    assert shared_width(Load("in0", "x_smem", (var("cv"), var("c"))), stage, "cv") == 1     # down a column
    assert shared_width(Load("in0", "x_smem", (var("r"), var("c"))), stage, "cv") == 1      # every lane alike
    # a second buffer starts 6 * 66 = 396 floats on (aligned), 6 * 65 = 390 (not)
    every_fourth = Load("in0", "x_smem", (var("r") * 4, col))
    assert shared_width(every_fourth, dataclasses.replace(stage, pad=2, buffers=2), "cv") == 4
    assert shared_width(every_fourth, dataclasses.replace(stage, pad=1), "cv") == 4
    assert shared_width(every_fourth, dataclasses.replace(stage, pad=1, buffers=2), "cv") == 1


def test_row_kernel_with_unaligned_rows_keeps_scalar_free_phase():
    c = deplokit.compile(nn.Softmax(dim=-1), torch.randn(3, 1001))
    assert not _vector_loops(c)
    assert "free phase" in _notes(c)[0] and "1001" in _notes(c)[0]


def test_simulator_rejects_a_float4_moved_off_its_boundary():
    c = deplokit.compile(lambda x: x * 2 + 1, torch.randn(8, 64))
    kp = c.kernel_ir
    kernel = kp.kernels[0]

    def shift(body):
        out = []
        for s in body:
            if isinstance(s, K.VectorLoad):
                s = dataclasses.replace(s, offset=K.Binary("+", s.offset, K.Const(2, "int")))
            out.append(s)
        return tuple(out)
    bad = KernelProgram(kp.buffers, kp.written, (dataclasses.replace(kernel, body=shift(kernel.body)),), kp.outputs)
    with pytest.raises(SimulationError, match=r"VectorLoad on buffer x at offset \d+: not 16-byte aligned"):
        simulate_program(bad, {"x": torch.randn(8, 64).numpy()})


def test_cli_prints_the_fallback_reason(capsys):
    from deplokit.cli import main
    code = main(["compile", "-c", "x = torch.randn(8, 36); x[:, 1:33] * 2", "--ir", "tile", "-v"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("# 005_blockify_launch: merged_mul: vector_width 4 not used: x[a0, a1 + 1]: offset 1 is not a "
            "multiple of 4 floats (16 bytes)") in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_ptx_has_128_bit_global_loads_and_stores(tmp_path, target):
    fn = lambda a, b: F.silu(a) * b                      # noqa: E731  (SwiGLU)
    inputs = (torch.randn(2, 16, 256), torch.randn(2, 16, 256))

    def ptx(config):
        src = tmp_path / "k.cu"
        src.write_text(str(deplokit.compile(fn, *inputs, target=target, config=config).cuda))
        subprocess.run(["nvcc", "-ptx", f"-arch={target}", "-O3", "-o", str(tmp_path / "k.ptx"), str(src)],
                       check=True, capture_output=True, timeout=120)
        return (tmp_path / "k.ptx").read_text()
    vec, scalar = ptx({}), ptx(SCALAR)
    assert vec.count("ld.global.nc.v4.f32") == 2 and vec.count("st.global.v4.f32") == 1
    assert "v4.f32" not in scalar and scalar.count("ld.global.nc.f32") == 2


def test_bank_model_counts_float4_shared_reads_by_phase():
    from deplokit.analysis.banks import _warp_worst, smem_loads
    lanes = np.arange(32, dtype=np.int64)
    assert _warp_worst(lanes * 4, 32, width=4) == 1          # consecutive float4 runs: conflict-free
    assert _warp_worst(lanes * 4, 32) == 4                   # the same words as scalar loads: 4-way
    assert _warp_worst(lanes * 8, 32, width=4) == 2          # every other run: 2-way per phase
    c = deplokit.compile(nn.RMSNorm(2048, eps=1e-6), torch.randn(1, 32, 2048))
    assert {ld.dst: ld.degree for ld in smem_loads(c.tile_ir.kernels[0])} == {"in0": 1, "in1": 1}
    step = next(s for s in c.trace if s.name == "014_pad_smem")
    assert step.skipped_reason == "merged_rms_norm: no stage's loads conflict on shared-memory banks"


def test_simulator_counts_a_float4_as_one_instruction():
    x = torch.randn(64, 256)
    counts = {}
    for width in (1, 4):
        c = deplokit.compile(lambda x: x * 2 + 1, x, config={"005_blockify_launch.vector_width": width})
        stats = []
        (got,) = simulate_program(c.kernel_ir, {"x": x.numpy()}, stats=stats)
        assert torch.equal(torch.from_numpy(got), x * 2 + 1)
        (st,) = stats
        assert st.global_bytes_loaded == st.global_bytes_stored == 4 * x.numel()
        counts[width] = (st.global_loads, st.global_stores)
    assert counts == {1: (x.numel(), x.numel()), 4: (x.numel() // 4, x.numel() // 4)}


@pytest.mark.parametrize("op", ["sum", "amax", "mean"])
def test_row_reduction_reads_its_row_with_float4(op):
    x = torch.randn(8, 1024)
    c = deplokit.compile(lambda x: getattr(torch, op)(x, -1), x)
    tile = c.tile_ir.kernels[0].tile()
    (phase,) = [s for s in tile.body if isinstance(s, StridedLoop)]
    assert phase.kind == "reduce" and isinstance(phase.body[0], Loop) and phase.body[0].kind == "vector"
    loads = [s for s in _vector_accesses(c) if isinstance(s, K.VectorLoad)]
    assert len(loads) == 1 and loads[0].source == "x"
    # the 4 values fold into the accumulator in order, as the loop would
    folds = [s for s in _kernel_stmts(c) if isinstance(s, K.Assign) and s.name == "acc0"]
    assert [f.value.args[1].name for f in folds[:4]] == ["in0_x", "in0_y", "in0_z", "in0_w"]
    assert c.check(backend="sim").ok


def test_a_clamped_float4_run_along_a_middle_dimension_stays_in_place():
    """fuzz seed 401 (MoE): x3[expert, k, 0] of an (8, 1000, 1) weight runs along k; the clamp
    of a gathered access shrank the last dimension (extent 1) instead, reading x3[e, k - 3]."""
    x, w, e = torch.randn(2, 1000), torch.randn(8, 1000, 1), torch.tensor([3, 7])
    c = deplokit.compile(lambda x, w, e: (x * w[e, :, 0]).sum(-1), x, w, e)
    loads = [line for line in str(c.kernel_ir).splitlines() if "float4 w[" in line]
    assert loads and all("-3" not in line for line in loads)
    assert c.check(backend="sim").ok
