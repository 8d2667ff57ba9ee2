"""TMA as tensor-map copies (sm_90): 011's boxes, 012's swizzle, the simulator's tensor-map
copies (box, zero fill, swizzle), the CUDA they render to and the host side of encoding.

A wrong swizzle (the copy writes one XOR, the reads apply another) must not pass: the
simulator places the bytes where the hardware would, so the numbers come out wrong."""
import ctypes
import dataclasses
import re

import numpy as np
import pytest
import torch
from stage_helpers import TMA_ON, build, step

import deplokit
from deplokit.analysis.banks import stage_cost
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_tma import MbarrierInit, MbarrierWait, TensorMap, TmaTensorLoad
from deplokit.ir.swizzle import swizzle_word
from deplokit.runtime.launch_plan import build_plan
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import SimulationError, simulate_kernel, simulate_program
from deplokit.runtime.tensor_map import TENSOR_MAP_DTYPE, encode


def simulate(c, program):
    env = dict(c.values)
    env.update(c._bind(c.example_inputs))
    (got,) = simulate_program(program, env)
    return torch.from_numpy(got)


def with_tensor_maps(c, fn):
    """c's Kernel IR with fn applied to each kernel's tensor maps."""
    kernels = tuple(dataclasses.replace(k, tensor_maps=tuple(fn(t) for t in k.tensor_maps))
                    for k in c.kernel_ir.kernels)
    return dataclasses.replace(c.kernel_ir, kernels=kernels)


# -- 012 swizzle_smem -------------------------------------------------------------------------------

def test_swizzle_halves_the_weight_fragment_bank_conflicts():
    # a Linear's weight box (rows of 16 floats): the B-fragment reads walk down a column
    # of 64-byte rows; the 64-byte swizzle spreads them over 4 chunks, halving both figures
    c = build("llm_projection")
    off = build("llm_projection", config={"012_swizzle_smem.enable": False})
    before, after = stage_cost(off.tile_ir.kernels[0]), stage_cost(c.tile_ir.kernels[0])
    (worst, waves), (worst_sw, waves_sw) = before["p_weight_smem"], after["p_weight_smem"]
    assert worst == 8 and (worst_sw, waves_sw) == (worst // 2, waves // 2)
    assert before["input_smem"] == after["input_smem"]          # the A fragment: conflict free either way
    st = step(c, "012_swizzle_smem")
    assert (f"p_weight_smem: 64-byte swizzle: reads' worst bank conflict 8 -> 4, "
            f"wavefronts {waves} -> {waves_sw}") in str(st)
    assert "p_weight_smem = TmaBufferedStage(p_weight" in str(c.tile_ir)
    assert re.search(r"tmap=\d+x16,swizzle=64B", str(c.tile_ir))
    assert "disabled by the knob" in step(off, "012_swizzle_smem").skipped_reason


def test_swizzle_span_follows_the_box_inner_row():
    from deplokit.ir.tile_ir import TmaBox
    from deplokit.passes.tma.tma_geometry import swizzle_for
    assert [swizzle_for(TmaBox((64, n)))[0] for n in (4, 8, 16, 32, 64)] == [0, 32, 64, 128, 0]
    assert "inner rows of 256 bytes are no swizzle span" in swizzle_for(TmaBox((16, 64)))[1]
    assert "not a whole 1024-byte swizzle pattern" in swizzle_for(TmaBox((4, 32)))[1]
    # reads that are conflict free stay unswizzled (the XOR would only cost instructions)
    c = build("matmul_ragged_n")
    assert not step(c, "012_swizzle_smem").changed
    assert any("a_smem: a 64-byte swizzle would leave its reads' wavefronts at 4 -> 4" in r
               for r in _reasons(c, "012_swizzle_smem"))


def test_every_read_of_a_swizzled_stage_applies_the_xor():
    c = build("llm_projection")
    (kernel, *_) = c.kernel_ir.kernels
    reads = [e for s in K.walk_stmts(kernel.body) for e in _exprs(s)
             if isinstance(e, K.SharedLoad) and e.array == "p_weight_smem"]
    assert reads and all("^" in K.format_expr(r.offset) for r in reads)
    assert c.check(backend="sim").ok


def test_a_wrong_swizzle_fails_numerically():
    c = build("llm_projection")
    want = c._eager(c.example_inputs).reshape(-1)
    torch.testing.assert_close(simulate(c, c.kernel_ir).reshape(-1), want, rtol=1e-4, atol=1e-4)
    assert {t.name: t.swizzle for k in c.kernel_ir.kernels for t in k.tensor_maps} == \
        {"input_tmap": 0, "p_weight_tmap": 64}
    # the weight's copy writes with another XOR than its reads apply (or none at all), or
    # the input's copy swizzles where its reads do not
    for wrong in ({"p_weight_tmap": 32}, {"p_weight_tmap": 0}, {"input_tmap": 64}):
        bad = with_tensor_maps(c, lambda t: dataclasses.replace(t, swizzle=wrong.get(t.name, t.swizzle)))
        got = simulate(c, bad).reshape(-1)
        assert not torch.allclose(got, want, rtol=1e-3, atol=1e-3), wrong


# -- the simulator's tensor-map copy ------------------------------------------------------------------

def _box_kernel(origin=(30, 36), swizzle=32, issuers=1, coords=None):
    """One block copies an 8 x 8 box of a 40 x 40 tensor at `origin`, then thread t stores
    box element t (read back through the swizzle)."""
    tid = K.Special("tid.x")
    tmap = TensorMap("x_tmap", "x", (40, 40), (8, 8), swizzle)
    at = tuple(K.Const(o, "int") for o in (coords or origin))
    read = swizzle_word(np.arange(64), swizzle)       # where box element t landed
    pick = K.Const(0, "int")
    for t in range(63, -1, -1):                        # a select chain: thread t reads word read[t]
        pick = K.Select(K.Binary("==", tid, K.Const(t, "int")), K.Const(int(read[t]), "int"), pick)
    body = (
        K.SharedArray("box", 64, align=1024),
        K.If(K.Binary("==", tid, K.Const(0, "int")), (MbarrierInit("bar", 1),)),
        K.Barrier(),
        K.If(
            K.Binary("<", tid, K.Const(issuers, "int")),
            (TmaTensorLoad("box", K.Const(0, "int"), "x_tmap", at, "bar"),),
        ),
        MbarrierWait("bar", K.Const(0, "int")),
        K.GlobalStore("out", tid, K.SharedLoad("box", pick)),
    )
    return K.KernelFunc("box", (K.Param("x"), K.Param("out", const=False)), (1, 1, 1), (64, 1, 1), body,
                        tensor_maps=(tmap,))


@pytest.mark.parametrize("swizzle", [0, 32])
def test_the_simulated_box_reads_zeros_outside_the_tensor(swizzle):
    x = np.arange(1600, dtype=np.float32)
    out = np.zeros(64, np.float32)
    simulate_kernel(_box_kernel(swizzle=swizzle), {"x": x, "out": out})
    want = np.zeros((8, 8), np.float32)
    want[:8, :4] = x.reshape(40, 40)[30:38, 36:40]
    np.testing.assert_array_equal(out.reshape(8, 8), want)


def test_the_simulated_copy_is_issued_by_one_thread_through_a_known_map():
    x, out = np.zeros(1600, np.float32), np.zeros(64, np.float32)
    with pytest.raises(SimulationError, match="issued by 2 threads"):
        simulate_kernel(_box_kernel(issuers=2), {"x": x, "out": out})
    with pytest.raises(SimulationError, match="3 coordinates for a box of rank 2"):
        simulate_kernel(_box_kernel(coords=(0, 0, 0)), {"x": x, "out": out})
    k = _box_kernel()
    with pytest.raises(SimulationError, match="no tensor map of the kernel"):
        simulate_kernel(dataclasses.replace(k, tensor_maps=()), {"x": x, "out": out})


# -- CUDA -------------------------------------------------------------------------------------------

def test_the_kernel_takes_a_grid_constant_tensor_map_per_operand():
    c = build("relu_matmul_seed")
    cuda = str(c.cuda)
    assert "struct alignas(64) deplokit_tensor_map { unsigned long long opaque[16]; };" in cuda
    assert (
        "const __grid_constant__ deplokit_tensor_map x_tmap, const __grid_constant__ deplokit_tensor_map w_tmap)"
        in cuda
    )
    # one copy per operand per stage: prologue and steady state issue each map once
    assert cuda.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes") == 4
    assert "cp.async.bulk.shared::cluster" not in cuda                      # no 1-D bulk copies
    for target in ("sm_80", "sm_120"):                                      # no TMA: no tensor maps
        other = str(build("relu_matmul_seed", target).cuda)
        assert "tensor_map" not in other and "cp.async.bulk" not in other


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_tensor_map_kernels_compile_for_sm_90():
    for name in ("relu_matmul_seed", "matmul_ragged_n", "llm_projection"):
        c = build(name)
        assert any(k.tensor_maps for k in c.kernel_ir.kernels)
        stats = c.nvcc().stats
        assert all(stats[k.name].spills == 0 for k in c.kernel_ir.kernels), name


# -- the host side: launch plan and encoding ---------------------------------------------------------

def test_the_launch_plan_records_each_tensor_map_as_the_kernel_expects():
    c = build("llm_projection")
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    cuda = str(c.cuda)
    kernels = {k.name: k for k in c.kernel_ir.kernels}
    seen = 0
    for ln in plan.launches:
        if ln.tensor_maps:      # the ring's one arrival announces every box's bytes together
            assert f'"r"({sum(t.args.box_bytes for t in ln.tensor_maps)})' in cuda
        for t, arg in zip(kernels[ln.name].tensor_maps, ln.tensor_maps):
            a = arg.args
            shape = plan.buffer(arg.buffer).shape
            assert (arg.param, arg.buffer) == (t.name, t.buffer)
            assert a.global_dims == shape[::-1] and a.box_dims == t.box[::-1] and a.rank == len(shape)
            assert a.global_strides == tuple(4 * int(np.prod(shape[d:])) for d in range(len(shape) - 1, 0, -1))
            assert a.data_type == 7 and a.swizzle == {0: 0, 32: 1, 64: 2, 128: 3}[t.swizzle] and a.oob_fill == 0
            # what the rendered kernel expects: the rank of its copies
            assert f"cp.async.bulk.tensor.{a.rank}d" in cuda
            seen += 1
    assert seen == 2
    assert "p_weight_tmap = tensor map of p_weight: dims (2048, " in plan.describe()
    assert "input_tmap = tensor map of input: dims (2048, 32, 1) strides (8192, 262144) B box (16, 32, 1) swizzle 0" \
        in plan.describe()


class _RecordingDriver:
    """libcuda's cuTensorMapEncodeTiled as the host sees it: the arguments of the call."""

    def __init__(self, result=0):
        self.calls, self.result = [], result

    def cuTensorMapEncodeTiled(self, out, dtype, rank, address, dims, strides, box, elem, *enums):
        n = rank.value
        self.calls.append(dict(dtype=dtype.value, rank=n, address=address.value, dims=tuple(dims[:n]),
                               strides=tuple(strides[:n - 1]), box=tuple(box[:n]), elem=tuple(elem[:n]),
                               enums=tuple(e.value for e in enums)))
        ctypes.memset(out.value, 0xAB, 128)            # the driver writes the 128 bytes
        return self.result


def test_encode_passes_the_plans_arguments_to_the_driver():
    c = build("matmul_ragged_n")
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    (ln,) = [ln for ln in plan.launches if ln.tensor_maps]
    driver = _RecordingDriver()
    maps = [encode(t.args, 0x7f0000001000 + 4096 * i, driver) for i, t in enumerate(ln.tensor_maps)]
    assert [m.dtype for m in maps] == [TENSOR_MAP_DTYPE] * 2 and all(
        (m["opaque"] == 0xABABABABABABABAB).all() for m in maps
    )
    a, b = driver.calls
    assert a == dict(dtype=7, rank=2, address=0x7f0000001000, dims=(64, 48), strides=(256,), box=(16, 32),
                     elem=(1, 1), enums=(0, 0, 2, 0))                       # no swizzle, L2 128B, zero fill
    assert b == dict(dtype=7, rank=2, address=0x7f0000002000, dims=(40, 64), strides=(160,), box=(32, 16),
                     elem=(1, 1), enums=(0, 0, 2, 0))
    from deplokit.errors import TensorMapError
    with pytest.raises(TensorMapError, match="cuTensorMapEncodeTiled failed with CUresult 1"):
        encode(ln.tensor_maps[0].args, 0x1000, _RecordingDriver(result=1))


@pytest.mark.gpu
def test_tensor_map_matmul_runs_on_the_gpu():
    from deplokit.runtime.device import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA device")
    for name in ("matmul_ragged_n", "llm_projection"):
        c = build(name)
        result = c.check(backend="cupy")
        assert result.ok, (name, str(result))


# -- helpers ------------------------------------------------------------------------------------------

def _stages(kernel):
    from deplokit.ir.tile_ir import Stage, walk
    return [s for s, _ in walk(kernel.body) if isinstance(s, Stage)]


def _reasons(c, label):
    st = step(c, label)
    return [st.skipped_reason or ""] + [str(d) for d in st.decisions]


def _exprs(node):
    """Every Kernel-IR expression node below a statement."""
    if isinstance(node, tuple):
        for n in node:
            yield from _exprs(n)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield node
        for f in dataclasses.fields(node):
            if f.name not in ("body", "then", "orelse"):
                yield from _exprs(getattr(node, f.name))


def test_the_kernel_verifier_knows_tensor_copies():
    from deplokit.passes.verify import IRInvariantError, verify
    c = build("relu_matmul_seed")
    verify(c.kernel_ir, c.target)
    with pytest.raises(IRInvariantError, match="TMA copy through x_tmap, which is no tensor map of the kernel"):
        verify(with_tensor_maps(c, lambda t: dataclasses.replace(t, name=t.name + "_gone")), c.target)


def test_swizzle_fixes_the_a_fragment_conflict_of_a_contiguous_register_tile():
    # 4 consecutive rows per thread (008's contiguous layout, 009 off): the A fragment's
    # reads down a column of 64-byte rows conflict 2-way; the 64-byte swizzle removes it
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=g), torch.randn(64, 256, generator=g)
    cfg = {"008_register_tile.layout": "contiguous", "009_permute_register_tile.permute": False,
           "014_pad_smem.pad": 0}
    before = deplokit.compile(lambda a, b: a @ b, a, b, config={**TMA_ON, **cfg, "012_swizzle_smem.enable": False})
    after = deplokit.compile(lambda a, b: a @ b, a, b, config={**TMA_ON, **cfg})
    assert stage_cost(before.tile_ir.kernels[0])["a_smem"] == (2, 8)
    assert stage_cost(after.tile_ir.kernels[0])["a_smem"] == (1, 4)
    assert "a_smem: 64-byte swizzle: reads' worst bank conflict 2 -> 1, wavefronts 8 -> 4" in str(
        step(after, "012_swizzle_smem"))
    assert after.check(backend="sim").ok


def test_the_access_view_sees_the_swizzled_words():
    # one warp's B-fragment read of a Linear's weight box: 8-way unswizzled, 4-way swizzled
    import torch.nn.functional as F

    from deplokit.analysis.access import memory_access
    torch.manual_seed(0)
    x, w = torch.randn(64, 256), torch.randn(128, 256)
    degrees = {}
    for swizzle in (False, True):
        c = deplokit.compile(F.linear, x, w, config={**TMA_ON, "012_swizzle_smem.enable": swizzle})
        assert "TmaBufferedStage(x1" in str(c.tile_ir)
        degrees[swizzle] = memory_access(c, "x1_smem").degree
    assert degrees == {False: 8, True: 4}
