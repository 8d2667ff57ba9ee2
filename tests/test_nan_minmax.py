"""torch's maximum, minimum, amax, relu and clamp give NaN where an operand is NaN; C's
fmaxf / fminf give the other operand. The CUDA printer spells float min / max as PTX's
min.NaN / max.NaN (deplokit_fminf / deplokit_fmaxf), and the simulator gives C's fmaxf its C
meaning, so a kernel that called fmaxf could not pass as torch's maximum."""
import numpy as np
import pytest
import torch
from bench_sim import F, S

import deplokit
from deplokit.ir.kernel_ir import Binary, Call, GlobalLoad, GlobalStore, KernelFunc, Param
from deplokit.passes.lower.cuda import render_kernel
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sim import simulate_kernel

PROGRAMS = {
    "relu": lambda x, y: torch.relu(x),
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "amax": lambda x, y: x.amax(-1),
    "amin": lambda x, y: x.amin(0),
    "clamp": lambda x, y: x.clamp(-0.5, 0.5),
}


def _nan_inputs():
    torch.manual_seed(0)
    x, y = torch.randn(8, 33), torch.randn(8, 33)
    x[1, 3] = x[5, 0] = float("nan")
    y[2, 7] = float("nan")
    return x, y


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_nan_propagates_like_torch(name):
    x, y = _nan_inputs()
    c = deplokit.compile(PROGRAMS[name], x, y)
    want = PROGRAMS[name](x, y)
    got = torch.as_tensor(np.asarray(c.run(x, y, backend="sim")))
    assert torch.isnan(want).any()
    torch.testing.assert_close(got, want, equal_nan=True)
    cuda = str(c.cuda)
    assert "fmaxf(" not in cuda.replace("deplokit_fmaxf(", "") and "fminf(" not in cuda.replace("deplokit_fminf(", "")
    assert "max.NaN.f32" in cuda or "min.NaN.f32" in cuda


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_nan_helpers_compile_in_a_program_and_alone(arch):
    x, y = _nan_inputs()
    c = deplokit.compile(lambda a, b: torch.minimum(torch.relu(a), b).amax(-1), x, y, target=arch)
    cuda = str(c.cuda)
    assert cuda.count("float deplokit_fmaxf(") == 1 and cuda.count("float deplokit_fminf(") == 1
    compile_cuda(cuda, arch)
    k = KernelFunc("k", (Param("x"), Param("out", const=False)), (1, 1, 1), (32, 1, 1),
                   (GlobalStore("out", S("tid.x"), Binary("max", GlobalLoad("x", S("tid.x")), F(0))),))
    compile_cuda(render_kernel(k, int(arch[3:])), arch, kernel_names=["k"])


def test_simulator_gives_c_fmaxf_its_c_meaning():
    tid = S("tid.x")
    x, y = GlobalLoad("x", tid), GlobalLoad("y", tid)
    body = (GlobalStore("c_max", tid, Call("fmaxf", (x, y))), GlobalStore("c_min", tid, Call("fminf", (x, y))),
            GlobalStore("torch_max", tid, Binary("max", x, y)), GlobalStore("torch_min", tid, Call("minimum", (x, y))))
    outs = ("c_max", "c_min", "torch_max", "torch_min")
    k = KernelFunc("k", (Param("x"), Param("y"), *(Param(o, const=False) for o in outs)), (1, 1, 1), (4, 1, 1), body)
    xv = np.array([np.nan, 1, 2, np.nan], np.float32)
    yv = np.array([3, np.nan, 1, np.nan], np.float32)
    bufs = {"x": xv, "y": yv, **{o: np.zeros(4, np.float32) for o in outs}}
    simulate_kernel(k, bufs)
    np.testing.assert_array_equal(bufs["c_max"], [3, 1, 2, np.nan])
    np.testing.assert_array_equal(bufs["c_min"], [3, 1, 1, np.nan])
    np.testing.assert_array_equal(bufs["torch_max"], [np.nan, np.nan, 2, np.nan])
    np.testing.assert_array_equal(bufs["torch_min"], [np.nan, np.nan, 1, np.nan])
