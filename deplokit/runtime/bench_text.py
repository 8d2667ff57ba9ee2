"""BenchReport as text (what `deplokit run --bench --profile` prints) and as JSON-ready dicts
(what the suite writes, and what a benchmark worker sends back to its parent)."""
from __future__ import annotations

import dataclasses

from .bench_report import BenchReport, KernelProfile

NO_GPU_MESSAGE = ("bench: timing needs a CUDA device and none is available (cupy found no GPU); "
                  "no timings will be taken: the cost model's figures per kernel instead")


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g} MB"


def format_bench(r: BenchReport, warmup: int, repeats: int) -> str:
    """deplokit, torch eager and torch.compile: µs, speedups, GB/s and % of the target's peak."""
    roof = (f"{r.peak_bandwidth_gbs:.0f} GB/s" if r.bound == "memory" else f"{r.peak_fp32_tflops:g} TFLOP/s FP32")
    lines = [f"bench: {r.gpu} ({r.target}), CUDA events, median of {repeats} runs after {warmup} warm-up, "
             f"L2 flushed before each run",
             f"  work: {_mb(r.bytes)} compulsory traffic, {r.flops / 1e9:.3g} GFLOP ({r.bound}-bound on "
             f"{r.target}'s reference part)",
             f"  deplokit        {r.deplokit_us:10.2f} us  {r.gbs:8.1f} GB/s  "
             f"{r.flops / (r.deplokit_us * 1e3):8.1f} GFLOP/s  {r.pct_of_peak:5.1f}% of peak {roof}"]
    for label, us, speed in (("torch eager", r.eager_us, r.speedup_vs_eager),
                             ("torch.compile", r.compile_us, r.speedup_vs_compile)):
        if us is not None:
            lines.append(f"  {label:<15} {us:10.2f} us  {r.bytes / (us * 1e3):8.1f} GB/s  "
                         f"deplokit speedup {speed:.2f}x")
    lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


def format_profile(r: BenchReport) -> str:
    """One row per kernel: time, share, bytes, FLOPs, GB/s, registers, smem, occupancy."""
    head = (f"  {'kernel':<36} {'us':>9} {'share':>6} {'MB':>9} {'MFLOP':>10} {'GB/s':>8} "
            f"{'regs':>5} {'smem B':>7} {'occup':>6}")
    total = sum(k.time_us for k in r.kernels) or 1.0
    lines = ["profile (per kernel, median):", head]
    for k in r.kernels:
        regs = "-" if k.registers is None else str(k.registers)
        smem = "-" if k.smem_bytes is None else str(k.smem_bytes)
        occ = "-" if k.occupancy is None else f"{100 * k.occupancy:.0f}%"
        lines.append(f"  {k.name:<36} {k.time_us:9.2f} {100 * k.time_us / total:5.1f}% {k.bytes / 1e6:9.3f} "
                     f"{k.flops / 1e6:10.2f} {k.gbs:8.1f} {regs:>5} {smem:>7} {occ:>6}")
    return "\n".join(lines) + "\n"


def report_to_dict(r: BenchReport) -> dict:
    d = dataclasses.asdict(r)
    d["speedup_vs_eager"] = r.speedup_vs_eager
    d["speedup_vs_compile"] = r.speedup_vs_compile
    d["gbs"] = r.gbs
    d["pct_of_peak"] = r.pct_of_peak
    d["bound"] = r.bound
    return d


def report_from_dict(d: dict) -> BenchReport:
    fields = {f.name for f in dataclasses.fields(BenchReport)}
    kfields = {f.name for f in dataclasses.fields(KernelProfile)}
    args = {k: v for k, v in d.items() if k in fields}
    args["kernels"] = tuple(KernelProfile(**{k: v for k, v in kd.items() if k in kfields})
                            for kd in d.get("kernels", ()))
    args["notes"] = tuple(d.get("notes", ()))
    return BenchReport(**args)
