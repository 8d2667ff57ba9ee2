"""Matmuls in machine code: what the default schedule makes of them, read from the SASS nvcc
emits for sm_90 (the machine code view, `deplokit compile ... --ir sass`), with the cost
model's prediction and the first-principles floor. Compile only: nothing is simulated or run.

For each program, its largest kernel (the matmul), default knobs:
    tile      block tile M x N x K-chunk, threads (005's thread_shape M x N), register tile
              TM x TN per thread
    layout    008's register layout (quads, warps: each warp its own sub-tile), and whether
              007 stored A k-major
    FFMA      FFMA share of the hottest loop's instructions (cuBLAS-class SGEMM: >= 0.85)
    LDS/FFMA  shared loads per FFMA there, and the loads by width (LDS / LDS.64 / LDS.128)
    loop instr  instructions of the hottest loop (static: each once)
    K loop    instructions and FFMA share of the K loop around it (the same loop when nvcc
              unrolled the k steps inside; an inner k loop it kept is the hottest)
    copies    copy instructions (UBLKCP + UTMALDG + LDGSTS) per K step (per pass of the K loop)
    producer  instructions of the K loop only the elected TMA producer's warp issues (its
              empty-slot wait, arrive.expect_tx, UTMALDG and their operands; 0 with cp.async)
    slots/K   issue slots a warp spends on a K step on average: what every warp issues plus the
              producer's share (producer / warps), out-of-line slow paths (a failed poll's
              retry after EXIT) left out (analysis/sass_issue.py); and the FFMA share of them.
              The column to compare TMA with cp.async, whose copies every warp issues. A k loop
              nvcc kept inside the K loop (a big register tile) counts once per pass it runs
              for a K step's FFMA (TM x TN x k chunk, the model's count)
    model slots/K  the cost model's slots per K step (MainLoop.slots_per_k_step: every warp's,
              the elected producer's / warps, the K step around a kept inner loop) and the
              producer's slots per K step (MainLoop.producer_per_k_step), beside the SASS ones
    regs      registers per thread, and spilled bytes (ptxas)
    model instr/slots  the cost model's main loop (tune/sass_model/main_loop.py): instructions per FFMA
              it predicts for the loop (compare 1 / FFMA share) and issue slots per FFMA
              (one warp's TMA issue weighted by the warps that run it)
    model us  the cost model's predicted time (tune/cost_model.py) of the whole program
    floor     max(FLOPs at 67 TFLOP/s FP32, compulsory bytes at 3.35 TB/s): the H100 bound
    model/fl  how far the prediction is from the floor (1.0 = at the floor)
    repack MB bytes 011's repack kernels read and write for operands whose rows are not 16 bytes
              apart (repack/repack.py: a padded copy a tensor map can read)

Needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump): without them the SASS columns
print as `-`. Run: PYTHONPATH=. python benchmarks/bench_matmul.py [--all] [--filter S]
[--config PASS.KNOB=VALUE ...] (--all: every matmul-shaped entry of the LLM suite, a few
minutes; --config: a knob other than its default for every kernel, to compare).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import deplokit
from deplokit.analysis.sass_issue import issue_split, slots_per_k_step
from deplokit.bench.suite import suite_entries
from deplokit.ir.loop_ir import Loop
from deplokit.ir.tile_ir import BLOCK, THREAD, walk
from deplokit.runtime.sass import sass_available
from deplokit.target import get_target
from deplokit.tune.cost_model import estimate

TARGET = "sm_90"
MATMUL_OPS = ("matmul", "matmul_bias", "matmul_add", "silu_mul_matmul")
# The issue's programs: square matmuls, the suite's projections, an odd shape.
DEFAULT_SUITE = ("matmul.tinyllama.gate_proj.s128", "matmul.qwen.q_proj.s32", "matmul.qwen.gate_proj.s512",
                 "matmul.qwen.up_proj.s512", "matmul.qwen.down_proj.s512", "matmul.qwen.o_proj.s128",
                 "matmul_add.qwen.down_proj.s512", "silu_mul_matmul.qwen.s512")


def programs(all_entries: bool):
    """(name, fn, input shapes)."""
    square = [(f"matmul {n}x{n} @ {n}x{n}", torch.matmul, ((n, n), (n, n))) for n in (4096, 2048)]
    entries = [e for e in suite_entries() if e.op in MATMUL_OPS]
    if not all_entries:
        entries = [e for name in DEFAULT_SUITE for e in entries if e.name == name]
    suite = [(e.name, e.program(), e.shapes) for e in entries]
    odd = [(f"matmul {m}x{k} @ {k}x{n}", torch.matmul, ((m, k), (k, n)))
           for m, k, n in ((1000, 777, 1531), (513, 1000, 999), (4095, 4095, 4095))]
    return square + suite + odd


def floor_us(works, target) -> float:
    """FLOPs at the FP32 peak or compulsory bytes at the DRAM peak, whichever is longer."""
    flops = sum(w.flops for w in works)
    compulsory = sum(w.compulsory_bytes for w in works)
    return max(flops / (target.peak_fp32_tflops * 1e6), compulsory / (target.peak_bandwidth_gbs * 1e3))


def tile_text(tile_kernel) -> str:
    """Block tile M x N (x K chunk), threads, register tile, read off the Tile IR's axes."""
    tile = tile_kernel.tile()
    threads = math.prod(a.extent for a in tile.axes if a.kind == THREAD)
    roles = {a.role: a.extent for a in tile.axes if a.kind == THREAD}
    shape = "x".join(str(roles[r]) for r in ("M", "N") if r in roles)
    text = f"{threads}t" + (f" ({shape})" if shape else "")
    regs = {}
    chunk = None
    for s, _ in walk(tile.body):
        if isinstance(s, Loop) and s.kind == "register":
            regs[s.role] = s.extent
        elif isinstance(s, Loop) and s.kind == "reduce" and s.var.endswith("i"):
            chunk = s.extent
    tm, tn = regs.get("M", 1), regs.get("N", 1)
    bm, bn = roles.get("M", 1) * tm, roles.get("N", 1) * tn
    splits = [a.extent for a in tile.axes if a.kind == BLOCK and a.role == "K"]
    text = f"{bm}x{bn}" + (f"x{chunk}" if chunk else "") + f" {text} {tm}x{tn}"
    return text + (f" splitK{splits[0]}" if splits else "")


def layout_text(tile_kernel) -> str:
    """008's register layout, and `A k-major` where 007 stored A's slab transposed."""
    knobs = dict(tile_kernel.knobs)
    text = str(knobs.get("008_register_tile.layout", "-"))
    return text + (" A k-major" if knobs.get("007_stage_inputs.a_k_major") else "")


def row(name, fn, shapes, target, with_sass: bool, config=None) -> list[str]:
    inputs = [torch.empty(s) for s in shapes]
    c = deplokit.compile(fn, *inputs, target=target.name, config=config or {})
    est = estimate(c.tile_ir, c.kernel_ir, target)
    works = [k.work for k in est.kernels if k.work is not None]
    floor = floor_us(works, target)
    main = max(works, key=lambda w: w.flops).name          # the matmul: the most FLOPs
    model = next((k.loop for k in est.kernels if k.name == main), None)
    cells = [name, tile_text(c.tile_ir.kernel(main)), layout_text(c.tile_ir.kernel(main))]
    if with_sass:
        k = c.sass().kernel(main)
        hot = k.hottest.mix if k.hottest else None
        loop = k.main_loop()
        copies = loop.mix.copies if loop else 0
        cells += [f"{hot.ffma_share:.2f}" if hot else "-",
                  f"{hot.shared_loads_per_ffma:.2f}" if hot and hot.ffma else "-",
                  f"{hot.lds}/{hot.lds64}/{hot.lds128}" if hot else "-",
                  f"{hot.instructions}" if hot else "-",
                  f"{loop.mix.instructions}/{loop.mix.ffma_share:.2f}" if loop else "-",
                  str(copies)]
        if loop:
            split = issue_split(k, loop)
            warps = -(-next(f.threads for f in c.kernel_ir.kernels if f.name == main) // 32)
            ffma = model.ffma * model.per_step if model and model.ffma else loop.mix.ffma
            slots = slots_per_k_step(k, loop, warps, ffma)
            cells += [str(split.producer), f"{slots:.0f}/{ffma / slots:.2f}"]
        else:
            cells += ["-", "-"]
        cells += [str(k.registers), str(k.spills)]
    else:
        cells += ["-"] * 10
    cells.insert(-2, f"{model.slots_per_k_step:.0f}/{model.producer_per_k_step:.0f}" if model and model.ffma else "-")
    cells += [f"{model.static_per_ffma:.2f}/{model.slots_per_ffma:.2f}" if model and model.ffma else "-",
              f"{est.time_us:.1f}", f"{floor:.1f}", f"{est.time_us / floor:.2f}", repack_text(c.tile_ir)]
    return cells


def repack_text(tile_ir) -> str:
    """Megabytes 011's repack kernels read and write (repack/repack.py), '-' without one."""
    types = tile_ir.types()
    moved = sum(4 * (types[r.tensor].numel + math.prod(r.shape)) for k in tile_ir.kernels for r in k.repacks)
    return f"{moved / 1e6:.1f}" if moved else "-"


HEADER = [
    "program",
    "tile (block, threads (M x N), per thread)",
    "layout",
    "FFMA",
    "LDS/FFMA",
    "LDS/.64/.128",
    "loop instr",
    "K loop/FFMA",
    "copies/K",
    "producer",
    "slots/K/FFMA",
    "model slots/K/prod",
    "regs",
    "spill B",
    "model instr/slots",
    "model us",
    "floor us",
    "model/fl",
    "repack MB",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="every matmul-shaped entry of the LLM suite")
    ap.add_argument("--filter", action="append", default=[], help="only programs whose name contains this")
    ap.add_argument("--config", action="append", default=[], metavar="PASS.KNOB=VALUE",
                    help="a scheduling knob for every kernel instead of its default, e.g. "
                         "008_register_tile.layout=warps or 007_stage_inputs.a_k_major=True")
    args = ap.parse_args(argv)
    config = dict(_knob(text) for text in args.config)
    target = get_target(TARGET)
    with_sass = sass_available()
    print(f"matmuls on {target.name} ({target.reference_gpu}: {target.peak_fp32_tflops:g} TFLOP/s FP32, "
          f"{target.peak_bandwidth_gbs / 1e3:.2f} TB/s), default knobs; hottest loop of the SASS "
          + ("(nvcc + cuobjdump)" if with_sass else "unavailable: install nvcc and nvidia-cuda-cuobjdump"))
    rows = [HEADER]
    start = time.time()
    for name, fn, shapes in programs(args.all):
        if args.filter and not any(f in name for f in args.filter):
            continue
        rows.append(row(name, fn, shapes, target, with_sass, config))
        print(f"  ... {name} ({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for r in rows:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


def _knob(text: str):
    """'PASS.KNOB=VALUE' -> (key, value), the value an int, a bool or a string."""
    key, _, value = text.partition("=")
    if value in ("True", "False"):
        return key, value == "True"
    return key, int(value) if value.lstrip("-").isdigit() else value


if __name__ == "__main__":
    sys.exit(main())
