"""The whole CuPy backend on the host: the executor runs with a stand-in for CuPy whose
arrays are numpy arrays and whose kernel launches run the SIMT simulator, after the real
translation unit has gone through NVRTC. This checks everything but the device itself:
NVRTC, the plan, uploads and type conversions, the arena, argument order, launch
configuration and output conversion, against torch eager."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deplokit
from deplokit.errors import ExecutionError
from deplokit.runtime.cupy_backend import DEVICE_ALIGN, CupyExecutor, half_to_storage, storage_dtype
from deplokit.runtime.launch_plan import CTYPE_DTYPE
from deplokit.runtime.nvrtc import nvrtc_available
from deplokit.runtime.sim.launch import simulate_kernel

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (cupy + libnvrtc) is not available")


class StandInCupy:
    """CuPy's interface as the executor uses it, on numpy and the simulator."""

    def __init__(self, kernel_program, compute_capability="90"):
        self.kernels = {k.name: k for k in kernel_program.kernels}
        self.launches = []
        self.loaded = []
        self.encoded = []               # (TensorMapArgs, address) of every tensor map encoded
        self.uint8 = np.uint8
        outer = self
        function = SimpleNamespace(Module=lambda: _Module(outer))
        self.attributes = []            # (function handle, attribute, value) set through the driver
        driver = SimpleNamespace(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8,  # CUfunction_attribute
            funcSetAttribute=lambda f, attribute, value: self.attributes.append((f, attribute, value)),
        )
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(compute_capability=compute_capability, id=0),
                                    driver=driver,
                                    function=function,
                                    get_current_stream=lambda: SimpleNamespace(synchronize=lambda: None))

    def encode_tensor_map(self, args, address):
        """What the backend would ask the driver to encode: recorded, and passed to the
        launch in place of the 128 bytes."""
        self.encoded.append((args, address))
        return ("tensor map", args, address)

    asarray = staticmethod(np.asarray)
    ascontiguousarray = staticmethod(np.ascontiguousarray)
    asnumpy = staticmethod(np.asarray)

    @staticmethod
    def zeros(n, dtype):                        # counters: zeroed once, left at zero by every launch
        return np.zeros(n, dtype=dtype)

    @staticmethod
    def empty(n, dtype):
        out = np.empty(n, dtype=dtype)
        out.view(np.uint8)[:] = 0xFF            # garbage, as device memory would hold
        return out

    @staticmethod
    def from_dlpack(t):
        raise AssertionError("host tensors are not passed through DLPack")


_HALF = ("bf16", "f16")


def _half_view(a, ctype):
    if ctype == "bf16":
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a.astype(np.float32) if ctype == "f16" else a


class _Module:
    def __init__(self, fake):
        self.fake = fake

    def load(self, cubin):
        assert cubin[:4] == b"\x7fELF"
        self.fake.loaded.append(cubin)

    def get_function(self, name):
        kernel = self.fake.kernels[name]

        def launch(grid, block, args, shared_mem=0, stream=None):
            # CuPy types grid and block as `tuple` (a list raises TypeError) and passes each
            # array as its bare data pointer: the dtype must be what the C parameter points to
            assert type(grid) is tuple and type(block) is tuple
            assert (grid, block, shared_mem) == (tuple(kernel.grid), tuple(kernel.block), kernel.dynamic_smem)
            assert len(args) == len(kernel.params) + len(kernel.tensor_maps)
            for p, a in zip(kernel.params, args):
                assert a.dtype == storage_dtype(CTYPE_DTYPE[p.ctype]), (name, p.name, a.dtype, p.ctype)
                assert a.flags.c_contiguous and a.ctypes.data % DEVICE_ALIGN == 0, (name, p.name)
            # each tensor map after the buffers, encoded for the very buffer the kernel's map
            # names, with the dims, box and swizzle its copies were planned for
            buffers = dict(zip((p.name for p in kernel.params), args))
            for t, (tag, margs, address) in zip(kernel.tensor_maps, args[len(kernel.params):]):
                assert tag == "tensor map" and address == buffers[t.buffer].ctypes.data, (name, t.name)
                assert (margs.global_dims, margs.box_dims) == (t.shape[::-1], t.box[::-1]), (name, t.name)
                assert margs.swizzle == {0: 0, 32: 1, 64: 2, 128: 3}[t.swizzle], (name, t.name)
            self.fake.launches.append(name)
            # the simulator holds a half buffer in float32: the device's 16-bit words converted
            # in, and the ones a kernel writes rounded back
            views = {p.name: _half_view(a, p.ctype) for p, a in zip(kernel.params, args)}
            simulate_kernel(kernel, views, max_block_threads=1024)
            for p, a in zip(kernel.params, args):
                if p.ctype in _HALF and not p.const:
                    a[:] = half_to_storage(views[p.name], CTYPE_DTYPE[p.ctype])
        launch.ptr = 0x1000 + list(self.fake.kernels).index(name)        # a CUfunction handle
        return launch


CASES = {
    "rmsnorm": (nn.RMSNorm(256), (torch.randn(2, 5, 256),)),
    "matmul_splitk_relu": (lambda a, b: torch.relu(a @ b), (torch.randn(4, 2048), torch.randn(2048, 8))),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                  (torch.randn(1, 4, 12, 16), torch.randn(1, 2, 12, 16), torch.randn(1, 2, 12, 16))),
    "embedding_mask": (lambda ids, w, m: torch.where(m, F.embedding(ids, w), -1.0),
                       (torch.randint(0, 10, (6,)), torch.randn(10, 16), torch.rand(6, 16) > 0.5)),
    "two_outputs": (lambda x: (x.softmax(-1), x.amax(-1) > 0), (torch.randn(3, 40),)),
    "bf16_matmul_softmax": (lambda a, b: torch.softmax(a @ b, -1),
                            (torch.randn(37, 53).to(torch.bfloat16), torch.randn(53, 29).to(torch.bfloat16))),
    "fp16_rmsnorm": (nn.RMSNorm(96).to(torch.float16), (torch.randn(5, 96).to(torch.float16),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_executor_runs_the_program_like_eager(name):
    fn, inputs = CASES[name]
    c = deplokit.compile(fn, *inputs)
    fake = StandInCupy(c.kernel_ir)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                           encode_tensor_map=fake.encode_tensor_map)
    result = c.check(backend="cupy")
    assert result.passed and result.backend == "cupy", str(result)
    assert fake.launches == [k.name for k in c.kernel_ir.kernels]
    assert len(fake.loaded) == 1
    # a second run reuses the loaded kernels and uploaded parameters
    fake.launches.clear()
    out = c.run(*inputs, backend="cupy")
    assert fake.launches == [k.name for k in c.kernel_ir.kernels] and len(fake.loaded) == 1
    if "16" in name:      # a half output's device words decode to the simulator's values, bit for bit
        assert out.dtype == inputs[0].dtype and torch.equal(out, c.run(*inputs, backend="sim"))


def test_executor_checks_inputs():
    fn, inputs = CASES["rmsnorm"]
    c = deplokit.compile(fn, *inputs)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=StandInCupy(c.kernel_ir))
    with pytest.raises(ExecutionError, match=r"input x has shape \(2, 5, 7\) float32; compiled for \(2, 5, 256\)"):
        c.run(torch.randn(2, 5, 7), backend="cupy")
    with pytest.raises(ExecutionError, match="expected 1 inputs"):
        c.run(backend="cupy")


def test_device_older_than_the_target_is_refused():
    fn, inputs = CASES["matmul_splitk_relu"]
    c = deplokit.compile(fn, *inputs, target="sm_90")
    with pytest.raises(ExecutionError, match="compiled for sm_90 but the CUDA device is sm_80; compile it with "
                                             "target='sm_80'"):
        CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target,
                     cupy=StandInCupy(c.kernel_ir, compute_capability="80"))


class LaunchCountingClock:
    """'Time' is the number of kernels launched: checks what each timed span covers."""

    def __init__(self, fake):
        self.fake = fake

    def record(self):
        return len(self.fake.launches)

    def elapsed_ms(self, a, b):
        return float(b - a)

    def synchronize(self):
        pass


def test_bench_plumbing_on_the_host():
    from deplokit.analysis.traffic import program_cost, program_kernel_costs
    from deplokit.runtime.bench import TimingDevice, bench_compilation

    fn, inputs = CASES["attention"]
    c = deplokit.compile(fn, *inputs)
    fake = StandInCupy(c.kernel_ir)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                           encode_tensor_map=fake.encode_tensor_map)
    flushes = []
    device = TimingDevice("stand-in", "cpu", LaunchCountingClock(fake), lambda: flushes.append(1))
    r = bench_compilation(c, inputs, warmup=1, repeats=3, compare=("eager",), profile=True, name="attn",
                          device=device)
    n = len(c.kernel_ir.kernels)
    assert (r.name, r.gpu, r.target) == ("attn", "stand-in", "sm_90")
    assert r.deplokit_us == 1000.0 * n            # each timed span is exactly one run of the program
    assert r.eager_us == 0.0 and r.compile_us is None and r.notes == ()
    assert [k.time_us for k in r.kernels] == [1000.0] * n     # one launch between consecutive events
    costs = program_kernel_costs(c.kernel_ir, c.loop_ir)
    assert [(k.name, k.bytes, k.flops) for k in r.kernels] == [(x.name, x.bytes, x.flops) for x in costs]
    total = program_cost(c.loop_ir)
    assert (r.bytes, r.flops) == (total.bytes, total.flops)
    assert all(0 < k.occupancy <= 1 and k.smem_bytes is not None for k in r.kernels)
    assert len(flushes) == 3 * (1 + 3)             # before every warm-up and timed run: ours, eager, profile


def test_cubin_falls_back_to_nvcc_without_nvrtc(monkeypatch):
    from deplokit.runtime import cupy_backend, nvcc
    if not nvcc.nvcc_available():
        pytest.skip("nvcc is not installed")
    fn, inputs = CASES["rmsnorm"]
    c = deplokit.compile(fn, *inputs)
    assert cupy_backend.compile_cubin(str(c.cuda), "sm_90")[:4] == b"\x7fELF"      # NVRTC
    monkeypatch.setattr(cupy_backend, "nvrtc_available", lambda: False)
    cubin = cupy_backend.compile_cubin(str(c.cuda), "sm_90")
    assert cubin == nvcc.compile_cuda(str(c.cuda), "sm_90").cubin


class _Stack(nn.Module):
    """Identical layers: dedup compiles their (middle) kernel once and launches it several times."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(5))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_executor_runs_a_deduplicated_program_launch_by_launch():
    x = torch.randn(4, 32)
    c = deplokit.compile(_Stack(), x, dedup=True)
    assert len(c.launches) > len({launch.runs for launch in c.launches})   # some kernel runs twice
    fake = StandInCupy(c.kernel_ir)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                           encode_tensor_map=fake.encode_tensor_map,
                           launches=c.launches, whole=c.loop_ir)
    result = c.check(backend="cupy")
    assert result.ok, str(result)
    assert len(fake.launches) >= len(c.launches) > len(c.kernel_ir.kernels)
def test_dynamic_smem_above_48k_is_opted_in_before_launch():
    """A kernel with static shared memory alone (<= 48 KiB) opts nothing in; a launch that
    asks for more dynamic shared memory must raise the kernel's maximum first."""
    import dataclasses
    fn, inputs = CASES["two_outputs"]
    c = deplokit.compile(fn, *inputs)
    fake = StandInCupy(c.kernel_ir)
    exe = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                       encode_tensor_map=fake.encode_tensor_map)
    assert fake.attributes == []                     # nothing to opt in: all static
    first, *rest = exe.plan.launches
    exe.plan = dataclasses.replace(exe.plan, launches=(dataclasses.replace(first, dynamic_smem=96 * 1024), *rest))
    exe._opt_in_dynamic_smem()
    assert fake.attributes == [(exe.functions[first.name].ptr, 8, 96 * 1024)]


def test_a_ring_in_dynamic_shared_memory_raises_the_limit_and_launches_with_its_bytes():
    """A stage ring above 48 KiB lives in dynamic shared memory: the executor raises the
    kernel's maximum to the plan's bytes before the first launch and launches with them."""
    x, w = torch.randn(64, 256), torch.randn(256, 64)
    # (4 stages: TMA boxes are unpadded, so 3 stages of two 8 KiB boxes are exactly 48 KiB)
    c = deplokit.compile(torch.matmul, x, w, config={"002_chunk_matmul_k.k_chunk": 32, "010_double_buffer.stages": 4})
    kernel = next(k for k in c.kernel_ir.kernels if k.dynamic_smem)
    assert kernel.dynamic_smem > 48 * 1024
    fake = StandInCupy(c.kernel_ir)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                           encode_tensor_map=fake.encode_tensor_map)
    ptr = c._cupy.functions[kernel.name].ptr
    assert fake.attributes == [(ptr, 8, kernel.dynamic_smem)]
    result = c.check(backend="cupy")
    assert result.ok, str(result)
    assert kernel.name in fake.launches


def test_device_outputs_cross_dlpack_in_their_types():
    """Outputs for device inputs go to torch through DLPack (numpy arrays stand in for CuPy's,
    which speak it too): dtypes and shapes as eager's, a bool output carried as bytes."""
    fn, inputs = CASES["two_outputs"]
    c = deplokit.compile(fn, *inputs)
    exe = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=StandInCupy(c.kernel_ir))
    bufs = exe.prepare(inputs)
    exe.launch(bufs)
    got = exe.outputs(bufs, on_device=True)
    want = fn(*inputs)
    assert [(t.dtype, t.shape) for t in got] == [(t.dtype, t.shape) for t in want]
    assert torch.equal(got[1], want[1]) and torch.allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    name = exe.plan.outputs[0]
    assert got[0].data_ptr() == bufs[name].ctypes.data           # zero-copy
