"""The LLM suite at default knobs, statically (no GPU): per entry and kernel, the grid (blocks,
blocks per SM, SM balance = mean blocks per SM / the busiest SM's), ptxas's registers and
spills (when nvcc is installed), the cost model's µs and the first-principles floor (the
program's compulsory bytes at the target's achievable bandwidth, or its FLOPs at its
cuBLAS-class FP32 rate, whichever is longer, plus one launch).

    python benchmarks/bench_suite_static.py [--filter REGEX] [--target sm_90] [--no-ptxas]

A matmul kernel (one with a K loop over M x N outputs) is flagged `!` when its SM balance is
under 0.90 with fewer than 8 blocks per SM (issue 26's bar); the summary counts them."""
from __future__ import annotations

import argparse
import re
import sys

from deplokit import compile as dk_compile
from deplokit.analysis.occupancy import balanced, sm_balance
from deplokit.bench.suite import suite_entries
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.tune.cost_model import estimate, first_principles_us, matmul_like


def entry_rows(e, target: str, ptxas: bool):
    c = dk_compile(e.program(), *e.inputs(empty=True), target=target)
    t = c.target
    # wgmma kernels build for the arch-specific target (sm_90a), as Compilation.sass() does
    stats = compile_cuda(str(c.cuda), c.cuda.build_arch(target), kernel_names=c.cuda.kernels).stats if ptxas else None
    est = {k.name: k for k in estimate(c.tile_ir, c.kernel_ir, t, stats).kernels}
    tiles = {k.name: k for k in c.tile_ir.kernels}
    rows = []
    for f in c.kernel_ir.kernels:
        blocks = f.grid[0] * f.grid[1] * f.grid[2]
        s = (stats or {}).get(f.name)
        mm = f.name in tiles and matmul_like(tiles[f.name]) and any(
            getattr(x, "role", "") == "K" for x in _loops(tiles[f.name]))
        rows.append(dict(kernel=f.name, blocks=blocks, threads=f.threads, per_sm=blocks / t.sm_count,
                         balance=sm_balance(blocks, t.sm_count), regs=s.registers if s else est[f.name].registers,
                         spills=s.spills if s else None, us=est[f.name].time_us, matmul=mm,
                         ok=balanced(blocks, t.sm_count)))
    return c, rows, sum(k.time_us for k in est.values()), first_principles_us(c.loop_ir, t)


def _loops(kernel):
    from deplokit.ir.loop_ir import Loop
    from deplokit.ir.tile_ir import walk
    return [s for s, _ in walk(kernel.tile().body) if isinstance(s, Loop)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="", help="regex on entry names")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--no-ptxas", action="store_true", help="estimate registers instead of running nvcc")
    args = ap.parse_args(argv)
    ptxas = nvcc_available() and not args.no_ptxas
    pattern = re.compile(args.filter)
    entries = [e for e in suite_entries("llm") if pattern.search(e.name)]
    print(f"{'entry / kernel':44s} {'blocks':>6s} {'thr':>4s} {'blk/SM':>6s} {'bal':>5s} {'regs':>4s} "
          f"{'spill':>5s} {'model µs':>9s} {'floor µs':>9s}")
    flagged = matmuls = kernels = 0
    ratios = []
    for e in entries:
        try:
            c, rows, us, floor = entry_rows(e, args.target, ptxas)
        except Exception as err:        # one line per failing entry; the rest still print
            print(f"{e.name:44s} FAILED {type(err).__name__}: {' '.join(str(err).split())[:80]}")
            continue
        kernels += len(rows)
        ratios.append(us / floor)
        print(f"{e.name:44s} {len(rows)} kernel{'s' if len(rows) > 1 else ' '} {'':>28s} {us:9.1f} {floor:9.1f}")
        for r in rows:
            flag = "!" if r["matmul"] and not r["ok"] else " "
            matmuls += r["matmul"]
            flagged += flag == "!"
            spills = "—" if r["spills"] is None else str(r["spills"])
            print(f"  {flag}{r['kernel'][:41]:41s} {r['blocks']:6d} {r['threads']:4d} {r['per_sm']:6.2f} "
                  f"{r['balance']:5.2f} {r['regs']:4d} {spills:>5s} {r['us']:9.1f}")
        sys.stdout.flush()
    if ratios:
        import math
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{len(ratios)} entries, {kernels} kernels; matmul kernels below SM balance 0.90 with < 8 blocks "
              f"per SM: {flagged} of {matmuls}; model / floor geomean {geo:.2f}"
              f"{'' if ptxas else ' (registers estimated: no nvcc)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
