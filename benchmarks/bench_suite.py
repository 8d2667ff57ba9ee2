"""The LLM kernel suite (`deplokit bench --suite llm`): on a CUDA device, deplokit vs torch
eager vs torch.compile on all 102 shapes, with geomean speedups. Without one, no timing is
taken: it says so and measures what can be measured here, compiling every entry through all
six IRs and NVRTC (run: make bench)."""
from __future__ import annotations

import statistics
import sys

from deplokit.bench.runner import run_suite
from deplokit.bench.suite import suite_entries
from deplokit.cli import main as cli_main
from deplokit.runtime.bench_text import NO_GPU_MESSAGE
from deplokit.runtime.device import gpu_available


def main() -> int:
    if gpu_available():
        return cli_main(["bench", "--suite", "llm"])
    print(NO_GPU_MESSAGE)
    entries = suite_entries("llm")
    result = run_suite(entries, "compile", timeout_s=600)
    ok = [r for r in result.rows if r["status"] == "ok"]
    print(f"suite llm, compile only (sm_90): {len(ok)}/{len(entries)} entries compile, "
          f"{sum(r['kernels'] for r in ok)} kernels")
    for key, label in (("compile_s", "deplokit.compile (torch.export -> CUDA)"), ("nvrtc_s", "NVRTC -> cubin")):
        xs = sorted(r[key] for r in ok[1:])     # the first entry also pays torch.export's set-up
        print(f"  {label}: median {statistics.median(xs) * 1e3:.0f} ms, max {xs[-1] * 1e3:.0f} ms per entry")
    for r in result.failed:
        print(f"  FAILED {r['name']}: {r['status']}: {r.get('error', '')}")
    return 0 if not result.failed else 1


if __name__ == "__main__":
    sys.exit(main())
