"""Stage rings in machine code: the matmuls of bench_matmul.py compiled with 2, 3 and 4 stages
(010 double_buffer's `stages` knob; 015 prefetches stages - 1 tiles), read from the SASS nvcc
emits for sm_90. Compile only: nothing is simulated or run.

For each program, its largest kernel (the matmul), default knobs but `stages`:
    stages    the ring the schedule made (fewer than asked when the K loop is shorter or the
              ring would not fit; `*` marks the default)
    copy      how the K loop's stages are copied (cp.async, TMA, both)
    smem      shared memory per block: static + dynamic bytes (dynamic above 48 KiB)
    K instr   instructions of the K loop (one pass: one K step, or a few when nvcc unrolled it)
    copies    copy instructions per K step (LDGSTS + UBLKCP + UTMALDG)
    BAR       block barriers per K step (__syncthreads)
    waits     mbarrier waits per K step (SYNCS.PHASECHK: the ring's full/empty waits)
    FFMA      FFMA share of the K loop
    regs      registers per thread, spilled bytes

Needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump). Run:
    PYTHONPATH=. python benchmarks/bench_stages.py [--all] [--filter S] [--stages 2 3 4]
        [--config 011_tma_copy.enable=False]   (cp.async stages instead of tensor-map rings)
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.tile_ir import Stage, walk
from deplokit.runtime.sass import sass_available

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_matmul import programs  # noqa: E402  (the same programs)

TARGET = "sm_90"
HEADER = ["program", "stages", "copy", "smem static+dyn", "K instr", "copies/K", "BAR/K", "waits/K", "FFMA",
          "regs/spill"]


def row(name, fn, shapes, stages, default, extra) -> list[str]:
    inputs = [torch.empty(s) for s in shapes]
    config = dict(extra) if not stages else {**extra, "010_double_buffer.stages": stages}
    c = deplokit.compile(fn, *inputs, target=TARGET, config=config)
    main = max(c.kernel_ir.kernels, key=lambda k: sum(isinstance(s, K.For) for s in K.walk_stmts(k.body)))
    tile = c.tile_ir.kernel(main.name)
    ring = [s for s, _ in walk(tile.tile().body) if isinstance(s, Stage) and s.buffers > 1]
    got = max((s.buffers for s in ring), default=1)
    copy = "+".join(sorted({s.copy for s in ring})) or "-"
    smem = f"{K.declared_smem_bytes(main)}+{getattr(main, 'dynamic_smem', 0)}"
    mark = "*" if got == default else ""
    cells = [name, f"{got}{mark}", copy, smem]
    k = c.sass().kernel(main.name)
    loop = k.main_loop()
    if loop is None:
        return cells + ["-"] * 6
    m = loop.mix
    return cells + [str(m.instructions), str(m.copies), str(m.bar), str(m.mbarrier_waits), f"{m.ffma_share:.2f}",
                    f"{k.registers}/{k.spills}"]


def default_stages(fn, shapes, extra) -> int:
    c = deplokit.compile(fn, *[torch.empty(s) for s in shapes], target=TARGET, config=dict(extra))
    rings = [s.buffers for t in c.tile_ir.kernels for s, _ in walk(t.tile().body) if isinstance(s, Stage)]
    return max(rings, default=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="every matmul-shaped entry of the LLM suite")
    ap.add_argument("--filter", action="append", default=[], help="only programs whose name contains this")
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3, 4],
                    help="ring sizes to compare (0: the default, e.g. on a deplokit without the knob)")
    ap.add_argument("--config", action="append", default=[], metavar="PASS.KNOB=VALUE",
                    help="another knob for every compile, e.g. 011_tma_copy.enable=False (cp.async stages)")
    args = ap.parse_args(argv)
    extra = {}
    for item in args.config:
        key, _, value = item.partition("=")
        extra[key] = int(value) if value.lstrip("-").isdigit() else {"True": True, "False": False}.get(value, value)
    if not sass_available():
        print("bench_stages: needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump)", file=sys.stderr)
        return 1
    print(f"stage rings on {TARGET}: the K loop of each matmul's SASS per ring size (* the default)")
    rows = [HEADER]
    start = time.time()
    for name, fn, shapes in programs(args.all):
        if args.filter and not any(f in name for f in args.filter):
            continue
        default = default_stages(fn, shapes, extra)
        for n in args.stages:
            rows.append(row(name, fn, shapes, n, default, extra))
        print(f"  ... {name} ({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for r in rows:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
