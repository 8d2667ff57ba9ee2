"""Whole models compiled by name to CUDA on this machine: TinyLlama-1.1B and Qwen2.5-7B at
seq 128, weights on the meta device, one decoder layer traced and stitched, identical
kernels compiled once (what `deplokit compile MODEL` does). Each run is a fresh
subprocess, so its peak memory (ru_maxrss) is its own. Prints figures; asserts nothing
about speed (run: make bench; targets: Qwen2.5-7B <= 20 s and <= 4 GiB).

    python benchmarks/bench_models.py [--seq N] [--repeats N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "Qwen/Qwen2.5-7B")

# Runs in the child: imports, build, compile (capture .. CUDA), each timed; then its peak RSS.
CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from deplokit.compilation import compile_model
from deplokit.frontend import models
t1 = time.perf_counter()
program = models.build(sys.argv[1], seq=int(sys.argv[2]))
t2 = time.perf_counter()
c = compile_model(program)
text = str(c.cuda)
t3 = time.perf_counter()
entries = c.inventory()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps(dict(imports=t1 - t0, build=t2 - t1, compile=t3 - t2, total=t3 - t0,
                      cpu=usage.ru_utime + usage.ru_stime,
                      rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                      source=program.source, torch_ops=len(c.torch_ir.ops), launches=len(c.launches),
                      unique=len(entries), cuda_bytes=len(text),
                      moved_gb=sum(e.launches * e.bytes for e in entries) / 1e9,
                      gflop=sum(e.launches * e.flops for e in entries) / 1e9)))
"""


def run_once(name: str, seq: int) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(seq)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in MODELS:
        runs = [run_once(name, args.seq) for _ in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("imports", "build", "compile", "total", "cpu", "rss_gib")}
        r = runs[-1]
        print(f"{r['source']}, median of {args.repeats} fresh processes:")
        print(f"  imports {med['imports']:.1f} s, build {med['build']:.2f} s, compile to CUDA {med['compile']:.1f} s; "
              f"total {med['total']:.1f} s (target <= 20 s); CPU time {med['cpu']:.1f} s; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"  peak RSS {med['rss_gib']:.2f} GiB (target <= 4 GiB)")
        print(f"  {r['torch_ops']} torch ops -> {r['launches']} launches of {r['unique']} unique kernels; "
              f"CUDA {r['cuda_bytes'] / 1e3:.0f} kB; {r['moved_gb']:.1f} GB moved, {r['gflop']:.0f} GFLOP a forward")


if __name__ == "__main__":
    main()
