"""Timing and reporting, host side: the timing loop's structure with a stand-in clock, the
report text and JSON, and the no-GPU behaviour (no timing is ever printed without a device).
The real timings are in tests/test_cupy_gpu.py (marked gpu)."""
import json

import pytest
import torch
from torch import nn

import deplokit
from deplokit.cli import main
from deplokit.compilation import resolve_backend
from deplokit.runtime.bench import time_kernels, time_runs
from deplokit.runtime.bench_report import BenchReport, KernelProfile
from deplokit.runtime.bench_text import NO_GPU_MESSAGE, format_bench, format_profile, report_from_dict, report_to_dict
from deplokit.runtime.device import DeviceUnavailableError, gpu_available

no_gpu = pytest.mark.skipif(gpu_available(), reason="checks the behaviour without a CUDA device")


class StandInClock:
    """Records the order of calls; elapsed time is the count of fn() calls between events
    (a test of the loop's structure, not a timing)."""

    def __init__(self, log):
        self.log = log

    def record(self):
        self.log.append("event")
        return len([x for x in self.log if x == "fn"])

    def elapsed_ms(self, a, b):
        return float(b - a)

    def synchronize(self):
        self.log.append("sync")


def test_time_runs_warms_up_flushes_outside_the_timed_span_and_times_each_run():
    log = []
    times = time_runs(lambda: log.append("fn"), StandInClock(log), warmup=2, repeats=3,
                      flush=lambda: log.append("flush"))
    assert times == [1000.0, 1000.0, 1000.0]        # one fn per span, in microseconds
    assert log == (["flush", "fn"] * 2 + ["sync"] + ["flush", "event", "fn", "event"] * 3 + ["sync"])
    with pytest.raises(ValueError):
        time_runs(lambda: None, StandInClock([]), warmup=0, repeats=0)


def test_time_kernels_splits_runs_at_launch_boundaries():
    log = []

    def launch(between):
        for i in range(3):
            if between:
                between(i)
            log.extend(["fn"] * (i + 1))             # kernel i "takes" i + 1 calls
        if between:
            between(3)
    per_kernel = time_kernels(launch, 3, StandInClock(log), warmup=1, repeats=4)
    assert per_kernel == [[1000.0] * 4, [2000.0] * 4, [3000.0] * 4]
    with pytest.raises(RuntimeError, match="between"):
        time_kernels(lambda between: None, 3, StandInClock([]), warmup=0, repeats=1)


def _report(**kw):
    args = dict(name="rmsnorm", gpu="Some GPU", target="sm_90", deplokit_us=10.0, eager_us=20.0, compile_us=None,
                bytes=33_554_432, flops=1_000_000, peak_bandwidth_gbs=3350.0, peak_fp32_tflops=67.0,
                kernels=(KernelProfile("merged_rms_norm", 10.0, 1, 33_554_432, 1_000_000, 40, 1024, 0.5),),
                notes=("torch.compile failed: X: y",))
    args.update(kw)
    return BenchReport(**args)


def test_report_text_has_us_speedup_gbs_and_peak_share():
    text = format_bench(_report(), warmup=10, repeats=100)
    assert "median of 100 runs after 10 warm-up" in text and "L2 flushed" in text
    assert "10.00 us" in text and "20.00 us" in text
    assert "speedup 2.00x" in text
    assert "3355.4 GB/s" in text                     # 33.5 MB in 10 us
    assert "100.2% of peak 3350 GB/s" in text
    assert "torch.compile " not in text.replace("torch.compile failed", "")   # no row without a timing
    assert "note: torch.compile failed" in text
    prof = format_profile(_report())
    assert "merged_rms_norm" in prof and "50%" in prof and " 40 " in prof and "1024" in prof


def test_report_round_trips_through_json():
    r = _report(compile_us=12.5)
    d = json.loads(json.dumps(report_to_dict(r)))
    assert d["speedup_vs_compile"] == pytest.approx(1.25) and d["bound"] == "memory"
    assert report_from_dict(d) == r


@no_gpu
def test_without_gpu_auto_is_the_simulator_and_bench_refuses():
    assert resolve_backend("auto") == "sim"
    c = deplokit.compile(nn.RMSNorm(64), torch.randn(1, 4, 64))
    assert c.check().backend == "sim"
    with pytest.raises(DeviceUnavailableError, match="benchmarking needs a CUDA device"):
        c.bench()
    with pytest.raises(DeviceUnavailableError, match="backend='cupy' needs a CUDA device"):
        c.run(torch.randn(1, 4, 64), backend="cupy")


@no_gpu
def test_cli_run_bench_without_gpu_says_so_and_prints_no_timing(capsys):
    code = main(["run", "-c", "nn.RMSNorm(64)(torch.randn(1,4,64))", "--bench", "--profile"])
    out = capsys.readouterr().out
    assert code == 0
    assert "no CUDA device, so the SIMT simulator ran" in out
    assert out.startswith(NO_GPU_MESSAGE)          # said first, before the compile
    assert "CUDA events" not in out and "speedup" not in out      # nothing was timed
    # what the machine can tell without a device: the model's figures per kernel, and the total
    head = next(line for line in out.splitlines() if "model us" in line).split()
    assert head == ["kernel", "launches", "MB", "MFLOP", "regs", "smem", "B", "occup", "model", "us", "roof", "us",
                    "bound"]
    assert "predicted, not measured" in out and "us at the roofline" in out


@no_gpu
def test_cli_run_without_gpu_bounds_the_simulator_and_still_profiles(capsys):
    """A program past the simulator's bound is not simulated (minutes, gigabytes): one line says
    so, and --profile still prints each kernel's model figures."""
    from deplokit.cli.run_cmd import SIM_AUTO_LIMIT_BYTES
    n = SIM_AUTO_LIMIT_BYTES // 4 // 1024            # input and output together: twice the bound
    code = main(["run", "-c", f"torch.randn({n},1024) * 2", "--profile"])
    out = capsys.readouterr().out
    assert code == 0
    assert "not checked" in out and "check against torch eager" not in out
    row = next(line for line in out.splitlines() if line.strip().startswith(("mul", "merged_mul")))
    assert float(row.split()[2]) == pytest.approx(2 * n * 1024 * 4 / 1e6, rel=1e-3)     # MB: in + out


@no_gpu
def test_cli_cupy_backend_and_suite_bench_without_gpu_are_one_line_errors(capsys):
    assert main(["run", "-c", "torch.randn(4) * 2", "--backend", "cupy"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deplokit: error: backend='cupy' needs a CUDA device") and err.count("\n") == 1
    assert main(["bench", "--suite", "llm", "--filter", "rmsnorm"]) == 2
    err = capsys.readouterr().err
    assert "timing the suite needs a CUDA device" in err and err.count("\n") == 1


def test_cli_compare_is_validated(capsys):
    from deplokit.cli.bench_cmd import parse_compare
    assert parse_compare("eager,compile") == ("eager", "compile")
    assert parse_compare("none") == ()
    with pytest.raises(deplokit.DeplokitError, match="unknown speed"):
        parse_compare("speed")


def test_a_function_holding_host_tensors_is_moved_whole_to_the_device():
    from deplokit.frontend.expression import load_expression
    from deplokit.runtime.bench import exported_on
    p = load_expression("x = torch.randn(4,8); lin = nn.Linear(8, 3); torch.relu(lin(x)) * 2")
    m = exported_on(p.fn, p.inputs, "meta")        # meta stands for the GPU: any tensor left on the host fails
    out = m(*(t.to("meta") for t in p.inputs))
    assert out.device.type == "meta" and tuple(out.shape) == (4, 3)
    torch.testing.assert_close(exported_on(p.fn, p.inputs, "cpu")(*p.inputs), p.fn(*p.inputs))


def test_cli_rejects_bad_repeat_counts(capsys):
    assert main(["run", "-c", "torch.randn(4) * 2", "--bench", "--repeats", "0"]) == 2
    assert "expected a whole number >= 1, got '0'" in capsys.readouterr().err
    assert main(["bench", "--suite", "llm", "--warmup", "-1"]) == 2
    assert "expected a whole number >= 0" in capsys.readouterr().err


def test_bench_rejects_bad_arguments_before_needing_a_gpu():
    c = deplokit.compile(lambda x: x * 2, torch.randn(4))
    with pytest.raises(deplokit.DeplokitError, match="unknown comparison speed"):
        c.bench(compare=("speed",))
    with pytest.raises(deplokit.DeplokitError, match="repeats >= 1"):
        c.bench(repeats=0)


class DriverSaysNothing:
    """A loaded executor whose driver queries fail (an old driver, a stand-in)."""

    def function_attributes(self, name):
        raise RuntimeError("no driver attributes")

    def occupancy(self, name):
        raise RuntimeError("no driver occupancy")


def test_kernel_resources_fall_back_on_ptxas_figures(monkeypatch):
    # where the driver cannot say, the profile reads ptxas's registers and shared memory from
    # Compilation.nvcc()'s stats (compiled once for all kernels), and the occupancy model
    from deplokit.analysis.occupancy import occupancy
    from deplokit.runtime import bench
    from deplokit.runtime.launch_plan import build_plan
    from deplokit.runtime.nvcc import nvcc_available
    torch.manual_seed(0)
    c = deplokit.compile(nn.RMSNorm(256), torch.randn(8, 256))
    (launch,) = build_plan(c.kernel_ir, c.input_names, c.target, c.launches, c.loop_ir).launches
    calls = []
    real_nvcc = type(c).nvcc

    def counted(self, *a, **k):
        calls.append(1)
        return real_nvcc(self, *a, **k)
    monkeypatch.setattr(type(c), "nvcc", counted)
    if nvcc_available():
        ptxas = bench.PtxasStats(c)
        regs, smem, occ = bench._kernel_resources(c, DriverSaysNothing(), launch, ptxas)
        stats = real_nvcc(c).stats[launch.name]
        assert (regs, smem) == (stats.registers, stats.smem_bytes) and regs > 0
        assert occ == occupancy(c.target, launch.threads, regs, smem).fraction
        bench._kernel_resources(c, DriverSaysNothing(), launch, ptxas)
        assert len(calls) == 1                   # nvcc ran once for the whole profile
    # without nvcc: no register figure (never a made-up one), the launch plan's shared memory
    monkeypatch.setattr(bench, "nvcc_available", lambda: False)
    regs, smem, occ = bench._kernel_resources(c, DriverSaysNothing(), launch, bench.PtxasStats(c))
    assert regs is None and smem == launch.static_smem
    assert occ == occupancy(c.target, launch.threads, None, smem).fraction
