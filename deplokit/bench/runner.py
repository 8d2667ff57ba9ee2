"""Running the suite: one job per entry in a watchdog worker (runtime/worker.py), so an entry
whose kernel faults or hangs is reported by name and the suite goes on.

    run_entry(name, ...)      in the worker: compile, check against eager on the GPU, bench
    compile_entry(name, ...)  in the worker, no GPU needed: compile and NVRTC-compile
    check_entry(name, ...)    in the worker: compile, check against eager from host and device inputs
    run_suite(entries, job)   in the parent: the rows, whatever happened to each entry
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import torch

from ..compilation import compile as dk_compile
from ..runtime.bench import time_eager_ways
from ..runtime.bench_text import report_to_dict
from ..runtime.nvrtc import compile_nvrtc
from ..runtime.worker import Outcome, Watchdog
from .suite import SuiteEntry, entry

CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4      # FP32 sums over K up to 18944 in a different order


def run_entry(name: str, target: str = "sm_90", warmup: int = 10, repeats: int = 100,
              compare=("eager", "compile"), profile: bool = False) -> dict:
    """Compile entry `name`, check it on the GPU against eager, and time it (worker side)."""
    e = entry(name)
    t0 = time.perf_counter()
    c = dk_compile(e.program(), *e.inputs(), target=target)
    compile_s = time.perf_counter() - t0
    inputs = tuple(t.to("cuda") for t in e.inputs())
    # FP32 at the suite's tolerance; bf16 at its own (against eager in bf16, cuBLAS on tensor
    # cores, and the FP32 reference: docs/precision.md)
    tol = dict(rtol=CHECK_RTOL, atol=CHECK_ATOL) if e.dtype == "float32" else {}
    check = c.check(*inputs, backend="cupy", **tol)
    row = {"name": name, "op": e.op, "kernels": len(c.kernel_ir.kernels), "compile_s": compile_s,
           "check": str(check), "max_abs_error": check.max_abs_error}
    if not check.passed:
        return {**row, "status": "mismatch"}
    report = c.bench(*inputs, warmup=warmup, repeats=repeats, compare=compare, profile=profile, name=name)
    ways = e.eager_ways()
    if len(ways) > 1 and "eager" in compare:
        # the best eager way: every way of `ways` timed alike; the report's eager is the fastest
        timed = time_eager_ways(ways, inputs, c.target, warmup=warmup, repeats=repeats)
        if timed:
            best = min(timed, key=timed.get)
            note = "eager took " + best + " (" + ", ".join(f"{k}: {v:.1f} µs" for k, v in timed.items()) + ")"
            report = dataclasses.replace(report, eager_us=timed[best], notes=report.notes + (note,))
            row["eager_way"] = best
    del c, inputs
    _release_device_memory()        # the next entry may need it all (qwen's down_proj: ~0.4 GB of inputs)
    return {**row, "status": "ok", "report": report_to_dict(report)}


def _release_device_memory() -> None:
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()


def compile_entry(name: str, target: str = "sm_90") -> dict:
    """Compile entry `name` through every IR and its CUDA through NVRTC (no GPU needed)."""
    e = entry(name)
    t0 = time.perf_counter()
    c = dk_compile(e.program(), *e.inputs(empty=True), target=target)
    t1 = time.perf_counter()
    compiled = compile_nvrtc(str(c.cuda), c.cuda.build_arch(target))   # sm_90a where a kernel issues wgmma
    t2 = time.perf_counter()
    return {"name": name, "op": e.op, "status": "ok", "kernels": len(c.kernel_ir.kernels),
            "compile_s": t1 - t0, "nvrtc_s": t2 - t1, "cubin_bytes": len(compiled.cubin)}


def check_entry(name: str, target: str = "sm_90") -> dict:
    """Compile entry `name` and check it against eager on the GPU, from host inputs and from
    device inputs; nothing is timed (the device session checks every entry before timing any)."""
    e = entry(name)
    c = dk_compile(e.program(), *e.inputs(), target=target)
    host = e.inputs()
    row = {"name": name, "op": e.op, "kernels": len(c.kernel_ir.kernels)}
    tol = dict(rtol=CHECK_RTOL, atol=CHECK_ATOL) if e.dtype == "float32" else {}   # as run_entry
    for where, inputs in (("host", host), ("device", tuple(t.to("cuda") for t in host))):
        check = c.check(*inputs, backend="cupy", **tol)
        row[f"check_{where}"] = str(check)
        if not check.passed:
            return {**row, "status": "mismatch", "check": f"{where} inputs: {check}"}
    del c
    _release_device_memory()
    return {**row, "status": "ok"}


JOBS = {"bench": "deplokit.bench.runner:run_entry", "compile": "deplokit.bench.runner:compile_entry",
        "check": "deplokit.bench.runner:check_entry"}


@dataclass
class SuiteResult:
    suite: str
    target: str
    job: str                        # bench | compile | check
    rows: list[dict] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] != "ok"]

    def geomeans(self) -> dict[str, float | None]:
        """Geometric-mean speedups of deplokit over eager and over torch.compile, over the
        entries that have both timings."""
        out = {}
        for key in ("eager_us", "compile_us"):
            ratios = [r["report"][key] / r["report"]["deplokit_us"] for r in self.rows
                      if r["status"] == "ok" and "report" in r and r["report"].get(key)]
            out[key.replace("_us", "")] = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        return out


def outcome_row(e: SuiteEntry, out: Outcome) -> dict:
    if out.ok:
        return {**out.value, "seconds": out.seconds}
    return {"name": e.name, "op": e.op, "status": out.status, "error": out.error, "seconds": out.seconds}


def run_suite(entries, job: str = "bench", *, suite: str = "llm", target: str = "sm_90", timeout_s: float = 600.0,
              progress=None, checkpoint=None, watchdog_target: str | None = None, **job_args) -> SuiteResult:
    """Every entry in one watchdog worker; a timeout, crash or error is that entry's row.
    `progress(i, n, row)` and `checkpoint(result)` are called after each entry (the CLI
    rewrites its JSON and markdown then, so a long run cut short keeps what it measured)."""
    result = SuiteResult(suite, target, job)
    with Watchdog(watchdog_target or JOBS[job], timeout_s=timeout_s) as dog:
        for i, e in enumerate(entries):
            row = outcome_row(e, dog.call(e.name, target=target, **job_args))
            result.rows.append(row)
            if progress is not None:
                progress(i, len(entries), row)
            if checkpoint is not None:
                checkpoint(result)
    return result
