"""Attention without S x T intermediates in global memory: what row fusion changes.

scaled_dot_product_attention at TinyLlama-1.1B's shapes (batch 1, 32 query heads, 4 kv
heads, seq 128, head_dim 64, causal), compiled twice: with row fusion off
(config {"fuse_rows.enable": False}: scores -> softmax -> P @ V as three kernels, the scores
and probabilities stored in global memory) and forced on ({"fuse_rows.by_cost": False}: one
kernel per query row that keeps both rows in shared memory; the fusion guard alone keeps the
three kernels at this shape), and flash attention (passes/flash/attention.py, the guard's
choice: one kernel, query tiles sharing staged K/V tiles, online softmax). Then issue 16's targets on a
Qwen2.5-7B-shaped causal GQA
attention (28 query heads, 4 kv heads, head_dim 128; seq 64 by default, `--seq N`): global
bytes loaded (simulator) against 3x the compulsory bytes of q, k, v and the output, and float
multiplies executed (simulator) against 0.6x the non-causal multiply-add count. Prints, for each: kernels,
global temporaries, the *compulsory*
global bytes (every global tensor a kernel reads or writes, counted once per kernel: the
DRAM traffic with perfect caching), the global bytes the SIMT simulator counts (every access
of every thread: K and V rows re-read by each query row's block mostly hit L1/L2), shared
memory per block, the check against torch eager, and per flash kernel how its K/V tiles are
copied (TMA box or cp.async, ring of N) and how wide its K reads are, and for the Qwen-shaped
flash kernels their plan (rows, lanes, register estimate against the cap, how far its grid fill
went: blocks on the SMs and why no further) and ptxas registers/spills. No GPU timings: none was available.
Run: .venv/bin/python benchmarks/bench_attention.py"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))    # llama_layer

import deplokit  # noqa: E402
from deplokit.ir import kernel_ir as K  # noqa: E402
from deplokit.ir.tile_ir import Stage, walk  # noqa: E402
from deplokit.runtime.nvcc import nvcc_available  # noqa: E402
from deplokit.runtime.sim import simulate_program  # noqa: E402

BATCH, HEADS, KV_HEADS, SEQ, HEAD_DIM = 1, 32, 4, 128, 64     # TinyLlama-1.1B, seq 128


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def compulsory_bytes(kernel_ir) -> int:
    """Each kernel reads or writes each of its global tensors once (4-byte elements)."""
    return sum(4 * p.size for k in kernel_ir.kernels for p in k.params)


def shared_bytes(kernel: K.KernelFunc) -> int:
    def walk(body):
        for s in body:
            if isinstance(s, K.SharedArray):
                yield 4 * s.size
            for child in ("body", "then", "orelse"):
                yield from walk(getattr(s, child, ()))
    return sum(walk(kernel.body))


def report(label: str, c, inputs) -> None:
    temps = [b for b in c.loop_ir.written if b.kind == "temp"]
    print(f"{label}:")
    print(f"  kernels: {len(c.kernel_ir.kernels)} ({', '.join(k.name for k in c.kernel_ir.kernels)})")
    temp_text = ", ".join(f"{b.name} {b.type.shape}" for b in temps) or "none"
    print(f"  global temporaries: {temp_text} = {sum(4 * b.type.numel for b in temps) / 2**20:.2f} MiB")
    print(f"  compulsory global bytes: {compulsory_bytes(c.kernel_ir) / 2**20:.2f} MiB")
    env = dict(c.values)
    env.update(c._bind(inputs))
    stats: list = []
    t0 = time.perf_counter()
    simulate_program(c.kernel_ir, env, max_block_threads=1024, stats=stats)
    wall = time.perf_counter() - t0
    loaded = sum(s.global_bytes_loaded for s in stats)
    stored = sum(s.global_bytes_stored for s in stats)
    print(f"  global bytes accessed by all threads (simulator): {loaded / 2**20:.2f} MiB loaded, "
          f"{stored / 2**20:.2f} MiB stored; simulated in {wall:.1f} s")
    for k in c.kernel_ir.kernels:
        print(f"    {k.name}: grid {k.grid[0]} x block {k.block[0]}, {shared_bytes(k)} bytes of shared memory")
    print(f"  {c.check(*inputs, backend='sim', rtol=1e-4, atol=1e-5)}")
    for line in staging(c):
        print(f"    {line}")
    if nvcc_available():
        found = c.nvcc().stats
        for k in c.kernel_ir.kernels:
            stats = found[k.name]
            print(f"    ptxas {c.target.name} {k.name}: {stats.registers} registers, {stats.spills} spills")


def staging(c) -> list[str]:
    """How each flash kernel's staged tiles are copied (011 TMA / 013 cp.async, ring or not)
    and how wide its reads of the key tile are (4 floats: one LDS.128)."""
    out = []
    for k in c.tile_ir.kernels:
        if k.flash is None:
            continue
        nodes = [s for s, _ in walk(k.body)]
        copies = ", ".join(f"{s.name} {s.copy}{' ' + s.tma.text() if s.tma else ''} x{s.buffers}"
                           for s in nodes if isinstance(s, Stage))
        widths = sorted({s.shared_width for s in nodes if getattr(s, "tensor", "") == "k_smem"})
        out.append(f"{k.name} ({c.target.name}): {copies}; k_smem read {'/'.join(map(str, widths))} floats a load")
    return out


def main() -> None:
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=g),
              torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=g),
              torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=g))
    print(f"sdpa q {tuple(inputs[0].shape)}, k and v {tuple(inputs[1].shape)}, causal, GQA "
          f"{HEADS // KV_HEADS} query heads per kv head")
    report("three kernels (before)", deplokit.compile(attention, *inputs, config=UNFUSED), inputs)
    report("row fusion forced", deplokit.compile(attention, *inputs, config=FORCED), inputs)
    report("flash attention (after; the guard's choice)", deplokit.compile(attention, *inputs), inputs)
    targets(int(sys.argv[sys.argv.index("--seq") + 1]) if "--seq" in sys.argv else 64)
    layer_figures()


NO_FLASH = {"fuse_attention.enable": False}
UNFUSED = {**NO_FLASH, "fuse_rows.enable": False}
FORCED = {**NO_FLASH, "fuse_rows.by_cost": False}


def targets(seq: int, heads: int = 28, kv_heads: int = 4, dim: int = 128) -> None:
    """Issue 16's simulator-counter targets, for the guard's choice and for forced row fusion."""
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, heads, seq, dim, generator=g), torch.randn(1, kv_heads, seq, dim, generator=g),
              torch.randn(1, kv_heads, seq, dim, generator=g))
    compulsory = 4 * (2 * heads * seq * dim + 2 * kv_heads * seq * dim)       # q, out, k, v
    macs = heads * seq * seq * (dim + dim)                                     # QK^T and PV, non-causal
    print(f"Qwen2.5-7B-shaped causal GQA attention, q (1, {heads}, {seq}, {dim}), kv (1, {kv_heads}, {seq}, {dim}):")
    print(f"  targets: global bytes loaded <= {3 * compulsory} (3x compulsory {compulsory}); "
          f"multiplies <= {int(0.6 * macs)} (0.6x non-causal {macs})")
    for label, config in (("before: three kernels", UNFUSED), ("row fusion forced", FORCED),
                          ("after: flash attention (the guard's choice)", {})):
        c = deplokit.compile(attention, *inputs, config=config)
        env = dict(c.values)
        env.update(c._bind(inputs))
        stats: list = []
        simulate_program(c.kernel_ir, env, max_block_threads=1024, stats=stats)
        loaded = sum(s.global_bytes_loaded for s in stats)
        muls = sum(s.float_multiplies for s in stats)
        print(f"  {label} ({len(c.kernel_ir.kernels)} kernels): global bytes loaded {loaded} "
              f"({loaded / compulsory:.2f}x compulsory), multiplies {muls} ({muls / macs:.2f}x non-causal)")
        for line in staging(c) + (registers(c) if not config else []):
            print(f"    {line}")
        notes = next(s for s in c.trace if s.name == "fuse_attention").notes
        for note in (n for n in notes if "grid fill" in n):     # the guard's estimates (fuse/grid_fill.py)
            print(f"    {note[note.index('grid fill'):]}")
    # the same shapes without the causal mask (compile only): its key loop from tile 0 has a ring
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), *inputs)
    for line in staging(c) + registers(c):
        print(f"  non-causal: {line}")
    step = next(s for s in c.trace if s.name == "fuse_attention")
    for note in (n for n in step.notes or (step.skipped_reason,) if "grid fill" in n):
        print(f"  non-causal: {'flash' if step.changed else 'three kernels'}, {note[note.index('grid fill'):]}")


def registers(c) -> list[str]:
    """Each flash kernel's plan (rows, lanes, its register estimate against the block's cap)
    and what ptxas made of it (registers, spill bytes), where nvcc is installed."""
    found = c.nvcc().stats if nvcc_available() else {}
    out = []
    for k in c.kernel_ir.kernels:
        if not k.name.startswith("flash"):
            continue
        plan = next(t.flash for t in c.loop_ir.kernels if t.flash is not None)
        out.append(f"{k.name}: block {k.block[0]}, {plan.text()}")
        if k.name in found:
            out.append(f"ptxas {c.target.name} {k.name}: {found[k.name].registers} registers, "
                       f"{found[k.name].spills} spills")
    return out


def layer_figures() -> None:
    """The whole decoder layer at the same shapes (compile only: kernels and bytes)."""
    from llama_layer import LlamaLayer
    torch.manual_seed(0)
    layer = LlamaLayer(hidden=2048, heads=HEADS, kv_heads=KV_HEADS, intermediate=5632)
    x = torch.randn(BATCH, SEQ, 2048)
    print(f"Llama decoder layer (hidden 2048, {HEADS}/{KV_HEADS} heads, intermediate 5632, seq {SEQ}):")
    for label, config in (("unfused", UNFUSED), ("row fusion forced", FORCED), ("flash attention", {})):
        c = deplokit.compile(layer, x, config=config)
        temps = sum(4 * b.type.numel for b in c.loop_ir.written if b.kind == "temp")
        print(f"  {label}: {len(c.loop_ir.kernels)} Loop-IR kernels ({len(c.kernel_ir.kernels)} launches with split-K "
              f"reducers), global temporaries {temps / 2**20:.2f} MiB, "
              f"compulsory global bytes {compulsory_bytes(c.kernel_ir) / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
