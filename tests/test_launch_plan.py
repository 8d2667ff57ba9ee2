"""The CuPy backend's host side, without a GPU: launch configuration, argument packing and
buffer planning (the scratch arena), checked by running the plan on the SIMT simulator with
every temporary a view into one arena, so overlapping live temporaries would show up as
wrong results."""
import dataclasses

import numpy as np
import pytest
import torch

import deplokit
from deplokit.ir.kernel_ir import KernelFunc, Param
from deplokit.runtime.launch_plan import (
    LaunchPlanError,
    build_plan,
    check_launch,
    pack_args,
    place_in_arena,
    static_smem_bytes,
)
from deplokit.runtime.sim.launch import simulate_kernel
from deplokit.target import TARGETS

H100 = TARGETS["sm_90"]


def run_plan_on_sim(c, inputs):
    """Follow the plan as the CuPy backend does, with numpy for device memory."""
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    arena = np.full(plan.scratch_bytes, 0xFF, dtype=np.uint8)     # garbage, as cupy.empty gives
    bufs = {}
    for spec in plan.buffers:
        if spec.name in c.values:
            bufs[spec.name] = np.ascontiguousarray(c.values[spec.name], dtype=spec.device_dtype).reshape(-1)
        elif spec.name in plan.inputs:
            t = inputs[plan.inputs.index(spec.name)]
            bufs[spec.name] = t.numpy().astype(spec.device_dtype).reshape(-1)
        elif spec.offset is not None:
            bufs[spec.name] = arena[spec.offset:spec.offset + spec.nbytes].view(spec.device_dtype)
        elif spec.kind == "counter":         # allocated zeroed (cupy.zeros), never in the arena
            bufs[spec.name] = np.zeros(spec.numel, dtype=spec.device_dtype)
        else:
            bufs[spec.name] = np.full(spec.numel, np.nan, dtype=spec.device_dtype)
    kernels = {k.name: k for k in c.kernel_ir.kernels}
    for ln in plan.launches:
        k = kernels[ln.name]
        args = pack_args(ln, bufs)
        assert [p.name for p in k.params] == list(ln.args)
        simulate_kernel(k, dict(zip(ln.args, args)), max_block_threads=1024)
    outs = []
    for name in plan.outputs:
        spec = plan.buffer(name)
        v = bufs[name].reshape(spec.shape)
        outs.append(torch.from_numpy(v != 0 if spec.dtype == "bool" else v.copy()))
    return plan, outs


def test_matmul_plan_launch_config_and_args():
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(1, 32, 256), torch.randn(256, 64))
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    assert [ln.name for ln in plan.launches] == [k.name for k in c.kernel_ir.kernels]
    for ln, k in zip(plan.launches, c.kernel_ir.kernels):
        assert (ln.grid, ln.block, ln.args) == (k.grid, k.block, tuple(p.name for p in k.params))
        assert ln.dynamic_smem == 0 and ln.static_smem == static_smem_bytes(k)
    assert plan.inputs == ("a", "b") and plan.outputs == ("matmul",)
    assert plan.buffer("matmul").nbytes == 4 * 32 * 64
    # split-K (003), reduced in the kernel: the partial sums live in the scratch arena, the
    # arrival counters outside it (zeroed once, left zero by every launch), one launch
    ws, counter = plan.buffer("merged_matmul_partials"), plan.buffer("merged_matmul_arrivals")
    assert ws.kind == "temp" and ws.offset == 0 and plan.scratch_bytes == ws.nbytes == 4 * 4 * 32 * 64
    assert counter.kind == "counter" and counter.offset is None and counter.device_dtype == "int32"
    assert [ln.args for ln in plan.launches] == [("a", "b", "merged_matmul_partials", "merged_matmul_arrivals",
                                                  "matmul")]
    # with a reducer kernel: the partials, then the reducer writes the output
    red = deplokit.compile(lambda a, b: a @ b, torch.randn(1, 32, 256), torch.randn(256, 64),
                           config={"003_split_matmul_k.reduce": "reducer"})
    plan = build_plan(red.kernel_ir, red.input_names, red.target)
    assert [ln.args for ln in plan.launches] == [("a", "b", "merged_matmul_partials"),
                                                 ("merged_matmul_partials", "matmul")]
    assert pack_args(plan.launches[0], {"a": 1, "b": 2, "merged_matmul_partials": 3, "other": 4}) == (1, 2, 3)
    with pytest.raises(LaunchPlanError, match="no buffer for parameter b"):
        pack_args(plan.launches[0], {"a": 1, "merged_matmul_partials": 3})
    assert "<<<" in plan.describe()


@pytest.mark.parametrize("case", ["attention", "chain", "matmul_splitk", "embedding_mask"])
def test_plan_runs_correctly_with_shared_arena(case):
    torch.manual_seed(0)
    if case == "attention":
        def fn(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) * 0.3, -1) @ v
        inputs = (torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
    elif case == "chain":
        # two reductions read by later kernels: temporaries whose lives end can be reused
        def fn(x):
            return torch.softmax(torch.softmax(x, -1).sum(0, keepdim=True) * x, -1).sum(-1)
        inputs = (torch.randn(16, 32),)
    elif case == "matmul_splitk":
        def fn(a, b):
            return torch.relu(a @ b)
        inputs = (torch.randn(4, 2048), torch.randn(2048, 8))
    else:
        def fn(ids, w, m):
            return torch.where(m, torch.nn.functional.embedding(ids, w), -1.0)
        inputs = (torch.randint(0, 10, (6,)), torch.randn(10, 16), torch.rand(6, 16) > 0.5)
    c = deplokit.compile(fn, *inputs)
    plan, outs = run_plan_on_sim(c, inputs)
    expected = fn(*inputs)
    torch.testing.assert_close(outs[0], expected, rtol=1e-4, atol=1e-5)
    temps = [b for b in plan.buffers if b.kind == "temp"]
    assert all(b.offset is not None and b.offset % 256 == 0 for b in temps)
    if case == "embedding_mask":
        assert plan.buffer("m").dtype == plan.buffer("m").device_dtype == "bool"
        assert plan.buffer("ids").device_dtype in ("int64", "int32")


def test_arena_shares_bytes_only_between_temporaries_that_are_never_live_together():
    offsets, size = place_in_arena([("a", 1000, (0, 1)), ("b", 500, (1, 2)), ("c", 1000, (2, 3)),
                                    ("d", 10, (3, 3))])
    # a and c never coexist: same bytes; b overlaps both; d overlaps c only
    assert offsets["a"] == offsets["c"] == 0
    assert offsets["b"] == 1024
    assert offsets["d"] == 1024
    assert size == 1024 + 512
    ivals = {"a": (0, 1), "b": (1, 2), "c": (2, 3), "d": (3, 3)}
    sizes = {"a": 1024, "b": 512, "c": 1024, "d": 256}
    for x in ivals:
        for y in ivals:
            live = ivals[x][0] <= ivals[y][1] and ivals[y][0] <= ivals[x][1]
            disjoint = offsets[x] + sizes[x] <= offsets[y] or offsets[y] + sizes[y] <= offsets[x]
            assert x == y or not live or disjoint


def test_arena_is_deterministic():
    items = [(f"t{i}", 100 * (i % 5 + 1), (i % 4, i % 4 + 2)) for i in range(20)]
    assert place_in_arena(items) == place_in_arena(list(reversed(items)))


def _kernel(grid=(1, 1, 1), block=(32, 1, 1), smem=None):
    return KernelFunc("k", (Param("x", "float", True, 4),), grid, block, (), smem_bytes=smem)


@pytest.mark.parametrize("kernel, message", [
    (_kernel(block=(2048, 1, 1)), "2048 threads per block; CUDA allows at most 1024"),
    (_kernel(block=(1, 1, 128)), "block.z = 128"),
    (_kernel(grid=(1, 70000, 1)), "grid.y = 70000; CUDA allows at most 65535"),
    (_kernel(grid=(0, 1, 1)), "must be positive"),
    (_kernel(smem=300 * 1024), "307200 bytes of static shared memory; a kernel may declare at most 49152"),
    (_kernel(smem=48 * 1024 + 16), "49168 bytes of static shared memory"),
])
def test_launch_limits(kernel, message):
    with pytest.raises(LaunchPlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_launch(kernel, H100)


def test_static_smem_up_to_48k_is_accepted():
    check_launch(_kernel(smem=48 * 1024), H100)


def test_plan_rejects_inconsistent_buffers():
    c = deplokit.compile(lambda x: x * 2, torch.randn(4, 4))
    k = c.kernel_ir.kernels[0]
    bad = dataclasses.replace(k, params=tuple(dataclasses.replace(p, size=p.size + 1) for p in k.params))
    with pytest.raises(LaunchPlanError, match="expects 17 elements, buffer x has 16"):
        build_plan(dataclasses.replace(c.kernel_ir, kernels=(bad,)), c.input_names, H100)
    ghost = dataclasses.replace(k, params=k.params + (Param("ghost", "float", True, 4),))
    with pytest.raises(LaunchPlanError, match="parameter ghost names no buffer"):
        build_plan(dataclasses.replace(c.kernel_ir, kernels=(ghost,)), c.input_names, H100)
    with pytest.raises(LaunchPlanError, match="input nope"):
        build_plan(c.kernel_ir, ("nope",), H100)
