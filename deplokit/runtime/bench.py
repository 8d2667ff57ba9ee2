"""Timing on a CUDA device: deplokit's kernels against torch eager and torch.compile.

Every figure comes from CUDA events: `warmup` untimed runs, then `repeats` timed runs, each
preceded (outside its event pair) by a write over a buffer twice the size of the L2 cache,
so no run finds its inputs left in L2 by the last; the median is reported. Bytes and FLOPs
come from the IR (analysis/traffic.py), so GB/s and FLOP/s are the same work for all three.
Without a CUDA device `bench_compilation` raises DeviceUnavailableError: no timing is ever
made up.
"""
from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass

import torch

from ..analysis.occupancy import occupancy as theoretical_occupancy
from ..analysis.traffic import program_cost, program_kernel_costs
from ..errors import DeplokitError
from ..frontend.capture import as_module
from .bench_report import BenchReport, KernelProfile
from .device import require_gpu
from .nvcc import nvcc_available

MIN_FLUSH_BYTES = 64 << 20


class CupyClock:
    """CUDA events on CuPy's current stream (the legacy default stream, which torch's kernels
    also run on unless a caller changed torch's stream)."""

    def __init__(self):
        import cupy
        self.cupy = cupy

    def record(self):
        ev = self.cupy.cuda.Event()
        ev.record()
        return ev

    def elapsed_ms(self, a, b) -> float:
        return self.cupy.cuda.get_elapsed_time(a, b)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()


def time_runs(fn, clock, *, warmup: int, repeats: int, flush=None) -> list[float]:
    """Microseconds of each of `repeats` timed calls of `fn` (after `warmup` untimed ones),
    `flush()` called before every call, outside the timed span."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        if flush:
            flush()
        fn()
    clock.synchronize()
    spans = []
    for _ in range(repeats):
        if flush:
            flush()
        start = clock.record()
        fn()
        spans.append((start, clock.record()))
    clock.synchronize()
    return [clock.elapsed_ms(a, b) * 1e3 for a, b in spans]


def time_kernels(launch, n_kernels: int, clock, *, warmup: int, repeats: int, flush=None) -> list[list[float]]:
    """Per-kernel microseconds: `launch(between)` runs the program calling `between(i)`
    before kernel i and after the last; an event there splits each run into its kernels."""
    for _ in range(warmup):
        if flush:
            flush()
        launch(None)
    clock.synchronize()
    runs = []
    for _ in range(repeats):
        if flush:
            flush()
        events = []
        launch(lambda i: events.append(clock.record()))
        runs.append(events)
    clock.synchronize()
    if any(len(ev) != n_kernels + 1 for ev in runs):
        raise RuntimeError("per-kernel timing: launch() did not call between() once per kernel and once after")
    return [[clock.elapsed_ms(ev[i], ev[i + 1]) * 1e3 for ev in runs] for i in range(n_kernels)]


def l2_flusher(l2_bytes: int):
    """A function that overwrites 2x the L2 cache (a memset on the device)."""
    import cupy
    buf = cupy.empty(max(2 * l2_bytes, MIN_FLUSH_BYTES), dtype=cupy.uint8)
    return lambda: buf.fill(0)


def cuda_eager(source, inputs_dev, device: str = "cuda"):
    """A version of the program that torch runs on `device`: a module copied there, or a
    function as it is when it runs on the device inputs, else (it holds host tensors, as the
    functions `-c` builds do) its torch.export graph moved there."""
    if isinstance(source, torch.nn.Module):
        return copy.deepcopy(source).to(device).eval()
    try:
        with torch.no_grad():
            source(*inputs_dev)
        return source
    except RuntimeError:
        # export traces shapes and dtypes only: host zeros stand in for the device inputs
        return exported_on(source, tuple(torch.zeros(t.shape, dtype=t.dtype) for t in inputs_dev), device)


def exported_on(fn, inputs_cpu, device: str):
    """`fn`'s torch.export graph as a module on `device`, its lifted constants (the tensors a
    function closes over, which `.to()` leaves behind) moved too."""
    with torch.no_grad():
        ep = torch.export.export(as_module(fn, len(inputs_cpu)), inputs_cpu, strict=False)
    module = ep.module().to(device)
    for sub in module.modules():
        for attr, value in list(vars(sub).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                setattr(sub, attr, value.to(device))
        if isinstance(sub, torch.fx.GraphModule):
            _retarget_factories(sub, torch.device(device))
    return module


def _retarget_factories(gm, device) -> None:
    """Tensors the function creates (`torch.ones(s, s)` for a mask) are traced with the host
    device spelled out in their node's kwargs; `.to()` leaves those, so point them at `device`."""
    changed = False
    for node in gm.graph.nodes:
        dev = node.kwargs.get("device") if node.op == "call_function" else None
        if isinstance(dev, torch.device) and dev != device:
            node.kwargs = {**node.kwargs, "device": device}
            changed = True
    if changed:
        gm.recompile()


@dataclass
class TimingDevice:
    """Where timing happens: the device's name, torch's name for it, its clock and the L2
    flush. `cuda_timing_device()` is the real one; tests pass a stand-in to check the
    benchmark's plumbing on the host (its numbers are never reported)."""
    name: str
    torch_device: str
    clock: object
    flush: object

    def synchronize(self) -> None:
        self.clock.synchronize()


def cuda_timing_device(target) -> TimingDevice:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    l2 = int(props.get("l2CacheSize", 0)) or target.l2_bytes
    return TimingDevice(name, "cuda", CupyClock(), l2_flusher(l2))


def bench_compilation(c, inputs, *, warmup: int = 10, repeats: int = 100, compare=("eager", "compile"),
                      profile: bool = False, name: str = "", device: TimingDevice | None = None) -> BenchReport:
    """Time compilation `c` on `inputs` (see the module docstring)."""
    unknown = [x for x in compare if x not in ("eager", "compile")]
    if unknown:
        raise DeplokitError(f"unknown comparison {', '.join(unknown)}; supported: eager, compile")
    if repeats < 1 or warmup < 0:
        raise DeplokitError(f"benchmark needs repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    if device is None:
        require_gpu("benchmarking")
        device = cuda_timing_device(c.target)
    clock, flush = device.clock, device.flush
    inputs_dev = tuple(t.detach().to(device.torch_device) for t in inputs)
    exe = c.cupy_executor()
    device.synchronize()
    bufs = exe.prepare(inputs_dev)
    ours = statistics.median(time_runs(lambda: exe.launch(bufs), clock, warmup=warmup, repeats=repeats, flush=flush))
    notes: list[str] = []
    eager_us = compile_us = None
    if compare:
        with fp32_matmuls():
            eager_us, compile_us = _time_torch(c, inputs_dev, device, compare, warmup, repeats, notes)
    kernels = ()
    if profile:
        kernels = _profile(c, exe, bufs, clock, warmup, repeats, flush)
    total = program_cost(c.loop_ir, name or "program")
    return BenchReport(name or "program", device.name, c.target.name, ours, eager_us, compile_us, total.bytes, total.flops,
                       c.target.peak_bandwidth_gbs, c.target.peak_fp32_tflops, kernels, tuple(notes))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


class fp32_matmuls:
    """Torch's matmuls in true FP32 (no TF32), as deplokit's kernels compute, for the timing.

    torch >= 2.9 has two TF32 APIs: setting the legacy `allow_tf32` is always allowed and sets
    the new `fp32_precision` too, but reading `allow_tf32` raises once a caller has set
    `fp32_precision = "tf32"` through the new API. The caller's setting is restored through
    whichever API can read it. cuDNN's flag is left alone: no deplokit program convolves."""

    def __enter__(self):
        matmul = torch.backends.cuda.matmul
        try:
            self.legacy, self.precision = matmul.allow_tf32, None
        except RuntimeError:            # set through the new API
            self.legacy, self.precision = None, matmul.fp32_precision
        matmul.allow_tf32 = False

    def __exit__(self, *exc):
        matmul = torch.backends.cuda.matmul
        if self.precision is None:
            matmul.allow_tf32 = self.legacy
        else:
            matmul.fp32_precision = self.precision


def _time_torch(c, inputs_dev, device, compare, warmup, repeats, notes):
    """Median µs of torch eager and torch.compile (None, with a note, where one fails)."""
    eager_us = compile_us = None
    clock, flush = device.clock, device.flush
    try:
        eager = cuda_eager(c.source, inputs_dev, device.torch_device)
    except Exception as e:
        notes.append(f"torch eager could not run on the GPU: {_first_line(e)}")
        return None, None

    def run(fn):
        with torch.no_grad():
            fn(*inputs_dev)
    if "eager" in compare:
        try:
            eager_us = statistics.median(time_runs(lambda: run(eager), clock, warmup=warmup, repeats=repeats,
                                                   flush=flush))
        except Exception as e:
            notes.append(f"torch eager failed: {_first_line(e)}")
    if "compile" in compare:
        try:
            # Dynamo caches per code object and falls back to eager past its cache limit; the
            # suite's programs share code objects across shapes, so start each from scratch.
            torch._dynamo.reset()
            compiled = torch.compile(eager)
            run(compiled)                       # compiles; not timed
            compile_us = statistics.median(time_runs(lambda: run(compiled), clock, warmup=warmup,
                                                     repeats=repeats, flush=flush))
        except Exception as e:                  # inductor raises many types; the report says why
            notes.append(f"torch.compile failed: {_first_line(e)}")
    return eager_us, compile_us


def _profile(c, exe, bufs, clock, warmup, repeats, flush) -> tuple[KernelProfile, ...]:
    launches = exe.plan.launches
    times = time_kernels(lambda between: exe.launch(bufs, between), len(launches), clock,
                         warmup=warmup, repeats=repeats, flush=flush)
    costs = {k.name: k for k in program_kernel_costs(c.kernel_ir, c.loop_ir)}
    out, ptxas = [], PtxasStats(c)
    for ln, ts in zip(launches, times):
        regs, smem, occ = _kernel_resources(c, exe, ln, ptxas)
        cost = costs[ln.name]
        out.append(KernelProfile(ln.name, statistics.median(ts), 1, cost.bytes, cost.flops, regs, smem, occ))
    return tuple(out)


class PtxasStats:
    """ptxas's figures per kernel (registers, shared memory, spills: runtime.nvcc.KernelStats)
    from Compilation.nvcc(), compiled on first use, once; {} without nvcc or when it fails."""

    def __init__(self, compilation):
        self.compilation, self._stats = compilation, None

    def get(self, kernel: str):
        if self._stats is None:
            self._stats = {}
            if nvcc_available():
                try:
                    self._stats = dict(self.compilation.nvcc().stats)
                except DeplokitError:
                    pass
        return self._stats.get(kernel)


def _kernel_resources(c, exe, launch, ptxas: PtxasStats):
    """(registers, static smem bytes, occupancy) of a loaded kernel: the driver's figures;
    where the driver cannot say, ptxas's (None registers without nvcc) and the occupancy
    calculator's."""
    try:
        attrs = exe.function_attributes(launch.name)
        regs, smem = attrs["registers"], attrs["smem_bytes"]
    except Exception:
        st = ptxas.get(launch.name)
        regs, smem = (st.registers, st.smem_bytes) if st is not None else (None, launch.static_smem)
    try:
        occ = exe.occupancy(launch.name)
    except Exception:
        occ = theoretical_occupancy(c.target, launch.threads, regs, smem).fraction
    return regs, smem, occ


def time_eager_ways(ways: dict, inputs, target, *, warmup: int = 10, repeats: int = 100,
                    device: TimingDevice | None = None) -> dict[str, float]:
    """Median µs of each eager callable of `ways` (name -> fn) on `inputs`, in true FP32 (no
    TF32), timed as bench_compilation times eager; a way that fails is left out."""
    if device is None:
        require_gpu("benchmarking")
        device = cuda_timing_device(target)
    inputs_dev = tuple(t.detach().to(device.torch_device) for t in inputs)
    out = {}
    with fp32_matmuls(), torch.no_grad():
        for name, fn in ways.items():
            try:
                out[name] = statistics.median(time_runs(lambda: fn(*inputs_dev), device.clock, warmup=warmup,
                                                        repeats=repeats, flush=device.flush))
            except Exception:           # a backend refusing one form: the other ways still count
                continue
    return out
