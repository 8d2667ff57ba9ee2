"""The CuPy backend on a real GPU: correctness against torch eager, and real timings. Every
test here needs a CUDA device and skips cleanly without one: `python -m pytest -m gpu` runs
them all (docs/GPU_RUNBOOK.md).

The whole schedule corpus (tests/programs.py: split-K matmuls with a reducer kernel, TMA stages on
sm_90, cp.async stages on sm_80, float4 accesses, attention row fusion, RMSNorm, odd sizes)
runs for every target the device can run, on host inputs (checked against CPU eager as the
simulator is) and on device inputs (checked against torch eager on the device)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from programs import config_of, corpus
from torch import nn

import deplokit
from deplokit.compilation import default_atol
from deplokit.runtime.bench import cuda_eager, fp32_matmuls
from deplokit.runtime.device import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device")]

CASES = {
    "rmsnorm": (nn.RMSNorm(2048), (torch.randn(1, 32, 2048),)),
    "odd_softmax": (lambda x: torch.softmax(x, -1), (torch.randn(3, 7, 1000),)),
    "matmul_splitk": (lambda a, b: torch.relu(a @ b), (torch.randn(4, 4096), torch.randn(4096, 24))),
    "matmul_square": (lambda a, b: a @ b, (torch.randn(256, 320), torch.randn(320, 192))),
    "gqa_sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                 (torch.randn(1, 8, 40, 64), torch.randn(1, 2, 40, 64), torch.randn(1, 2, 40, 64))),
    "embedding_mask": (lambda ids, w, m: torch.where(m, F.embedding(ids, w), -1.0),
                       (torch.randint(0, 50, (9,)), torch.randn(50, 33), torch.rand(9, 33) > 0.5)),
}


PROGRAMS = corpus()


def _target():
    from deplokit.runtime.cupy_backend import device_arch
    cc = device_arch()[1]
    return "sm_120" if cc >= 120 else "sm_90" if cc >= 90 else "sm_80"


@pytest.mark.parametrize("name", sorted(CASES))
def test_cupy_matches_eager(name):
    fn, inputs = CASES[name]
    c = deplokit.compile(fn, *inputs, target=_target())
    assert c.check(backend="cupy").ok
    out = c.run(*inputs, backend="auto")
    assert out.device.type == "cpu"
    cuda_inputs = tuple(t.cuda() for t in inputs)
    got = c.run(*cuda_inputs, backend="cupy")
    assert got.is_cuda
    assert c.check(*cuda_inputs, backend="cupy").ok        # eager on the device, a module's weights too
    fn_cuda = copy.deepcopy(fn).cuda() if isinstance(fn, nn.Module) else fn
    torch.testing.assert_close(got, fn_cuda(*cuda_inputs), rtol=1e-4, atol=1e-4)


def test_repeated_runs_are_independent():
    fn, inputs = CASES["matmul_splitk"]
    c = deplokit.compile(fn, *inputs, target=_target())
    a = c.run(*inputs, backend="cupy")
    b = c.run(*inputs, backend="cupy")         # split-K partials reduced in a fixed order
    assert torch.equal(a, b)                   # no atomics: bit-identical run to run


def test_bench_reports_real_timings_and_profile():
    c = deplokit.compile(nn.RMSNorm(2048), torch.randn(1, 128, 2048), target=_target())
    r = c.bench(warmup=3, repeats=10, compare=("eager",), profile=True)
    assert r.deplokit_us > 0 and r.eager_us > 0 and r.compile_us is None
    assert r.bytes == 4 * (2 * 128 * 2048 + 2048)
    assert [k.name for k in r.kernels] == [k.name for k in c.kernel_ir.kernels]
    assert all(k.time_us > 0 and k.registers > 0 and 0 < k.occupancy <= 1 for k in r.kernels)
    assert c.bench(warmup=1, repeats=3, compare=()).eager_us is None


def test_suite_entry_runs_end_to_end():
    from deplokit.bench.runner import run_entry
    row = run_entry("rmsnorm.tinyllama.s32", target=_target(), warmup=2, repeats=5, compare=("eager",))
    assert row["status"] == "ok", row
    assert row["report"]["deplokit_us"] > 0


def test_suite_entry_checks_from_host_and_device_inputs():
    from deplokit.bench.runner import check_entry
    row = check_entry("softmax.tinyllama.s32", target=_target())
    assert row["status"] == "ok", row
    assert "check_host" in row and "check_device" in row and "report" not in row   # checked, never timed


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_on_the_device(name, target):
    from deplokit.runtime.cupy_backend import device_arch
    if device_arch()[1] < int(target[3:]):
        pytest.skip(f"the device is older than {target}")
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, target=target, config=config_of(PROGRAMS[name]))
    result = c.check(backend="cupy")                # host inputs, against CPU eager
    assert result.ok, str(result)
    cuda_inputs = tuple(t.cuda() for t in inputs)
    got = torch.utils._pytree.tree_leaves(c.run(*cuda_inputs, backend="cupy"))
    assert all(t.is_cuda for t in got)
    with torch.no_grad():
        want = torch.utils._pytree.tree_leaves(fn(*inputs))
    for g, w in zip(got, want, strict=True):        # device inputs: the same answer as host inputs
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=default_atol(w), equal_nan=True)
    # and torch eager on the device (what bench times) agrees wherever it is finite: where a
    # mask hides a whole row, a device SDPA kernel may give NaN where the CPU gives zeros
    with torch.no_grad(), fp32_matmuls():
        on_device = torch.utils._pytree.tree_leaves(cuda_eager(fn, cuda_inputs)(*cuda_inputs))
    for g, d in zip(got, on_device, strict=True):
        assert d.is_cuda and d.shape == g.shape and d.dtype == g.dtype
        finite = torch.isfinite(d) if d.is_floating_point() else torch.ones_like(d, dtype=torch.bool)
        torch.testing.assert_close(g[finite], d[finite], rtol=1e-4, atol=10 * default_atol(d[finite]))


def _one_entry_per_op():
    from deplokit.bench.suite import suite_entries
    first = {}
    for e in suite_entries("llm"):
        if e.seq == 32:
            first.setdefault(e.op, e.name)
    return sorted(first.values())


@pytest.mark.parametrize("name", _one_entry_per_op())
def test_suite_programs_match_eager_on_the_device(name):
    """Each of the suite's 11 programs at its real shapes (seq 32), checked as the suite checks
    them, before any time is spent benchmarking."""
    from deplokit.bench.runner import CHECK_ATOL, CHECK_RTOL
    from deplokit.bench.suite import entry
    e = entry(name)
    c = deplokit.compile(e.program(), *e.inputs(), target=_target())
    result = c.check(*(t.cuda() for t in e.inputs()), backend="cupy", rtol=CHECK_RTOL, atol=CHECK_ATOL)
    assert result.ok, str(result)


def test_aligned_device_inputs_are_used_in_place():
    fn, inputs = PROGRAMS["residual_add_float4"]
    c = deplokit.compile(fn, *inputs, target=_target())
    x, res = (t.cuda() for t in inputs)
    bufs = c.cupy_executor().prepare((x, res))
    assert bufs[c.input_names[0]].data.ptr == x.data_ptr()


def test_bench_times_torch_compile():
    c = deplokit.compile(lambda x, y: torch.sigmoid(x) * y + 1.0, torch.randn(4096, 1024), torch.randn(4096, 1024),
                         target=_target())
    r = c.bench(warmup=2, repeats=5, compare=("eager", "compile"))
    assert r.notes == () and r.eager_us > 0 and r.compile_us > 0


def test_preflight_passes(capsys):
    from deplokit.cli import main
    assert main(["preflight"]) == 0, capsys.readouterr().out


def test_misaligned_device_inputs_are_realigned():
    """Last in the file: were the view passed as it is, float4 loads would fault with a
    misaligned address, which poisons the CUDA context for every later test."""
    fn, inputs = PROGRAMS["residual_add_float4"]
    c = deplokit.compile(fn, *inputs, target=_target())
    x = torch.randn(inputs[0].numel() + 1, device="cuda")[1:].view(inputs[0].shape)
    res = inputs[1].cuda()
    assert x.data_ptr() % 16 != 0
    torch.testing.assert_close(c.run(x, res, backend="cupy"), x + res, rtol=1e-6, atol=1e-6)
