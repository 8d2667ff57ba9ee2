"""`deplokit bench` and the `--bench` / `--profile` half of `deplokit run`.

    deplokit bench --suite llm --list
    deplokit bench --suite llm [--filter S ...] [--compare eager,compile] [--profile] [--out DIR]
    deplokit bench --suite llm --compile-only        (no GPU needed: compile + NVRTC each entry)
    deplokit bench --suite llm --resume              (run only what an earlier, cut-short run left)

Without a CUDA device nothing is timed: `run --bench` / `--profile` say so before compiling
and print what the machine can tell without one (format_model_profile: per kernel bytes,
FLOPs, registers, shared memory, occupancy, the cost model's µs and the roofline), and
`bench --suite` (timing) is a one-line error.
"""
from __future__ import annotations

import os
import sys

from ..bench.report import summary, to_json, to_markdown
from ..bench.resume import merged, previous_rows, still_to_run
from ..bench.runner import run_suite
from ..bench.suite import select, suite_entries
from ..errors import DeplokitError, DeviceUnavailableError
from ..runtime.bench_text import format_bench, format_profile
from ..runtime.device import gpu_available
from ..runtime.nvcc import nvcc_available
from ..tune.cost_model import estimate
from ..tune.roofline import roofline_of
from .program import write_atomic


def parse_compare(text: str) -> tuple[str, ...]:
    parts = tuple(p for p in text.split(",") if p) if text not in ("", "none") else ()
    bad = [p for p in parts if p not in ("eager", "compile")]
    if bad:
        raise DeplokitError(f"--compare {text!r}: unknown {', '.join(bad)}; use eager, compile, "
                            "both (eager,compile) or none")
    return parts


def bench_after_run(args, compilation) -> None:
    """Print the timings `run --bench/--profile` asked for, or say that none can be taken."""
    if not (args.bench or args.profile):
        return
    if not gpu_available():
        sys.stdout.write(format_model_profile(compilation, per_kernel=args.profile))
        return
    report = compilation.bench(warmup=args.warmup, repeats=args.repeats, compare=parse_compare(args.compare),
                               profile=args.profile, name=args.expr or args.path or "program")
    sys.stdout.write(format_bench(report, args.warmup, args.repeats))
    if args.profile:
        sys.stdout.write(format_profile(report))




def cmd_bench(args) -> int:
    entries = select(suite_entries(args.suite), args.filter)
    if args.dtype:
        entries = tuple(e for e in entries if e.dtype == args.dtype)
    job = "compile" if args.compile_only else "bench"
    job_args = {}
    if job == "bench":
        if not gpu_available():
            raise DeviceUnavailableError("timing the suite needs a CUDA device and none is available; no timings "
                                         "were taken (--list prints the shapes, --compile-only compiles them)")
        job_args = {"warmup": args.warmup, "repeats": args.repeats, "compare": parse_compare(args.compare),
                    "profile": args.profile}

    def progress(i, n, row):
        what = row["status"] if row["status"] != "ok" else "ok"
        if row["status"] == "ok" and "report" in row:
            rep = row["report"]
            what += f" {rep['deplokit_us']:.2f} us"
        elif row["status"] == "ok" and "nvrtc_s" in row:
            what += f" (compile {row['compile_s']:.2f} s, NVRTC {row['nvrtc_s']:.2f} s, {row['kernels']} kernels)"
        elif row["status"] != "ok":
            what += f": {row.get('error') or row.get('check', '')}"
        print(f"[{i + 1}/{n}] {row['name']}: {what}", flush=True)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise DeplokitError(f"cannot create {args.out}: {e.strerror or e}") from None
    stem = os.path.join(args.out, f"suite_{args.suite}_{args.target}{'_compile' if job == 'compile' else ''}")

    previous = previous_rows(stem + ".json", args.suite, args.target, job) if args.resume else {}
    todo = still_to_run(entries, previous)
    if previous:
        print(f"resuming: {len(entries) - len(todo)} of {len(entries)} entries already ok in {stem}.json")

    def checkpoint(result):
        result = merged(entries, previous, result)
        write_atomic(stem + ".json", to_json(result))
        write_atomic(stem + ".md", to_markdown(result))
    try:
        result = run_suite(todo, job, suite=args.suite, target=args.target, timeout_s=args.timeout,
                           progress=progress, checkpoint=checkpoint, **job_args)
    except KeyboardInterrupt:       # `timeout -s INT`: what was measured is already written
        print(f"interrupted; {stem}.json holds the entries measured so far: rerun with --resume", file=sys.stderr)
        return 130
    checkpoint(result)
    result = merged(entries, previous, result)
    sys.stdout.write(summary(result))
    print(f"wrote {stem}.json and {stem}.md")
    return 0 if not result.failed else 1


def format_model_profile(compilation, per_kernel: bool = True) -> str:
    """What `run --bench/--profile` prints without a device: per kernel (per_kernel) its
    launches, compulsory bytes, FLOPs, registers (ptxas's where nvcc is installed, else the
    model's estimate), shared memory, occupancy, the cost model's µs and the roofline's; then
    the program's total. Nothing here is a measurement."""
    stats = compilation.nvcc().stats if nvcc_available() else None
    est = {k.name: k for k in estimate(compilation.tile_ir, compilation.kernel_ir, compilation.target, stats).kernels}
    roof = roofline_of(compilation)
    launches = {e.kernel: e.launches for e in compilation.inventory()}
    regs_from = "ptxas" if stats else "estimated"
    head = (f"  {'kernel':<32} {'launches':>8} {'MB':>9} {'MFLOP':>10} {'regs':>5} {'smem B':>7} {'occup':>6} "
            f"{'model us':>9} {'roof us':>9}  bound")
    lines = [f"model profile on {roof.target} ({roof.gpu}, {roof.peak_bandwidth_gbs:g} GB/s, "
             f"{roof.peak_gflops / 1e3:g} TFLOP/s FP32): predicted, not measured; registers {regs_from}"]
    if per_kernel:
        lines.append(head)
    total_model = total_roof = 0.0
    for p in roof.points:
        k, n = est[p.name], launches.get(p.name, 1)
        total_model += n * k.time_us
        total_roof += n * p.roof_us
        if per_kernel:
            side = "memory" if p.intensity < roof.ridge else "compute"
            lines.append(f"  {p.name:<32} {n:>8} {p.bytes / 1e6:9.3f} {p.flops / 1e6:10.2f} {k.registers:>5} "
                         f"{k.smem_bytes:>7} {100 * k.occupancy:5.0f}% {k.time_us:9.2f} {p.roof_us:9.2f}  "
                         f"{side} (model: {k.bound})")
    lines.append(f"  program: {total_model:.2f} us by the cost model, {total_roof:.2f} us at the roofline "
                 f"({100 * total_roof / total_model:.0f}% of the roof)" if total_model else "  program: no kernels")
    return "\n".join(lines) + "\n"
