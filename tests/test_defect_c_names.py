"""Issue 13 defect 2: names CUDA C++ rejects. A kernel named after a C-linkage function of
CUDA's headers (exp, div, tanh, max, time, ...), a tensor named like a C keyword (int), or
an input named like a generated local (tid, a0, acc0, in0, x_smem) must still compile, run
and pass nvcc; and the simulator must refuse a kernel whose names nvcc would refuse."""
from __future__ import annotations

import pytest
import torch
from defect_checks import check_everywhere, needs_nvcc

from deplokit.ir import kernel_ir as K
from deplokit.ir.c_names import RESERVED, c_rejects, c_safe, tensor_name_ok
from deplokit.ir.kernel_ir import name_problems, unclash_locals
from deplokit.runtime.sim import SimulationError
from deplokit.runtime.sim.launch import simulate_kernel

UNARY = {
    "exp": torch.exp, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "erf": torch.erf,
    "log": lambda x: torch.log(x.abs() + 1), "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
    "div": lambda x: torch.div(x, 3.0), "max": lambda x: torch.amax(x, -1), "maximum": lambda x: torch.maximum(x, -x),
    "abs": torch.abs, "sqrt": lambda x: torch.sqrt(x.abs()), "sigmoid": torch.sigmoid,
    "pow": lambda x: torch.pow(x, 2), "neg": torch.neg,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_kernel_named_after_a_math_function(name):
    c = check_everywhere(UNARY[name], torch.randn(16, 40), atol=1e-5)
    for k in c.kernel_ir.kernels:
        assert c_rejects(k.name) is None, k.name
        assert all(c_rejects(p.name) is None for p in k.params)


@pytest.mark.parametrize("name", ["tid", "bid", "a0", "a0t", "a2o", "acc0", "in0", "v0", "lane", "warp",
                                  "x_smem", "int", "float", "exp", "time", "select", "k0_in0"])
def test_input_names_that_meet_generated_names(name):
    """A matmul with an epilogue reading the same input: staging, register tiles, TMA."""
    fn = eval(f"lambda {name}, w: torch.relu({name} @ w + {name}[:, :1])") if name not in ("int", "float") \
        else (lambda x, w: torch.relu(x @ w + x[:, :1]))
    x, w = torch.randn(64, 32), torch.randn(32, 32)
    c = check_everywhere(fn, x, w, atol=1e-4)
    for k in c.kernel_ir.kernels:
        assert name_problems(k) == [], (k.name, name_problems(k))


def test_c_safe_gives_names_c_takes_and_keeps_good_ones():
    for name in ("x", "hidden_states", "w_q", "linear_1", "relu", "softmax"):
        assert c_safe(name) == name
    for name in ("exp", "int", "__x", "_Y", "tid", "acc0", "a0t", "1x", "time", "max"):
        safe = c_safe(name)
        assert safe != name and tensor_name_ok(safe), (name, safe)
    assert c_safe("exp", {"exp_1"}) == "exp_2"
    assert {"exp", "expf", "div", "max", "tanh", "int", "threadIdx", "select"} <= RESERVED


def test_in_place_op_names_make_no_double_underscore():
    """fuzz seed 303 case 149: `.add_(x1)` named a tensor `add_`; its split part became
    `merged_add__part0`, which CUDA C++ reserves to the compiler."""
    assert not tensor_name_ok("add_") and c_safe("add_") == "add" and c_safe("add_", {"add"}) == "add_1"
    x0 = torch.randn(3, 129, 31)
    c = check_everywhere(lambda x0, x1: torch.tanh(torch.sigmoid(torch.argmin(x0).float())).add_(x1),
                         x0, torch.randn(()), atol=1e-5)
    for k in c.kernel_ir.kernels:
        assert name_problems(k) == [], (k.name, name_problems(k))


def _kernel(name="k", params=("x", "out"), body=()):
    ps = (K.Param(params[0], size=4), K.Param(params[1], const=False, size=4))
    return K.KernelFunc(name, ps, (1, 1, 1), (4, 1, 1), tuple(body))


def _copy_body(x="x", out="out", local="v"):
    tid = K.Special("tid.x")
    return (K.Declare(local, "float", K.GlobalLoad(x, tid)), K.GlobalStore(out, tid, K.Var(local)))


@pytest.mark.parametrize("kernel_name, params, local", [
    ("exp", ("x", "out"), "v"),        # C linkage: nvcc rejects the kernel
    ("k", ("int", "out"), "v"),        # a keyword as a parameter
    ("k", ("x", "out"), "x"),          # a local redeclaring a parameter
    ("k", ("x", "out"), "__v"),        # reserved to the compiler
])
def test_simulator_refuses_what_nvcc_refuses(kernel_name, params, local):
    k = _kernel(kernel_name, params, _copy_body(params[0], params[1], local))
    assert name_problems(k)
    x = torch.randn(4).numpy()
    with pytest.raises(SimulationError, match="CUDA C\\+\\+ rejects"):
        simulate_kernel(k, {params[0]: x, params[1]: x.copy() * 0})


def test_unclash_locals_renames_only_locals():
    k = _kernel("k", ("x", "out"), _copy_body("x", "out", "x"))
    fixed = unclash_locals(k)
    assert name_problems(fixed) == []
    assert [p.name for p in fixed.params] == ["x", "out"]
    x = torch.randn(4).numpy()
    out = x.copy() * 0
    simulate_kernel(fixed, {"x": x, "out": out})
    assert (out == x).all()
    assert unclash_locals(_kernel(body=_copy_body())) == _kernel(body=_copy_body())


@pytest.mark.timeout(30)
@pytest.mark.parametrize("local", ["__v", "_Tmp", "x__y", "1v"])
def test_unclash_locals_renames_a_name_c_reserves_to_one_it_takes(local):
    # appending _N to `__v` never gives a name C takes: the new name starts from a clean base
    # (a Falcon model hung here)
    fixed = unclash_locals(_kernel("k", ("x", "out"), _copy_body("x", "out", local)))
    assert name_problems(fixed) == []
    x = torch.randn(4).numpy()
    out = x.copy() * 0
    simulate_kernel(fixed, {"x": x, "out": out})
    assert (out == x).all()


@needs_nvcc
def test_every_reserved_kernel_name_is_refused_by_nvcc_sample():
    """The reserved list is not wider than C: a sample of it really fails as a kernel name,
    and the safe replacement compiles."""
    from deplokit.runtime.nvcc import NvccError, compile_cuda
    for name in ("exp", "div", "tanh", "max", "select", "rsqrtf"):
        src = f'extern "C" __global__ void {name}(float* p) {{ p[0] = 1.0f; }}\n'
        with pytest.raises(NvccError):
            compile_cuda(src, "sm_80", kernel_names=(name,))
        safe = c_safe(name)
        compile_cuda(src.replace(name, safe), "sm_80", kernel_names=(safe,))
