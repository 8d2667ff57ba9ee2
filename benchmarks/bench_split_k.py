"""Split-K without atomics (pass 003): blocks launched by the suite's matmul projections at
short sequences (M = 32 and M = 128 tokens), where the output tiles alone cannot fill an
H100's 132 SMs. Compile only: nothing is simulated or run.

For each entry: splits (003's knob, default heuristic), blocks of the matmul kernel, the
reducer's blocks, the workspace bytes it uses in the scratch arena, and `atomic` if any
emitted kernel of the program still contains an atomic (it must not).

Run: PYTHONPATH=. python benchmarks/bench_split_k.py [--filter S] [--splits N]
(--splits 1: the grid without split-K, for before/after).
"""
from __future__ import annotations

import argparse

import deplokit
from deplokit.bench.suite import suite_entries

MATMUL_OPS = ("matmul", "matmul_bias", "matmul_add", "silu_mul_matmul")


def row(e, config) -> str:
    c = deplokit.compile(e.program(), *e.inputs(empty=True), target="sm_90", config=config)
    kernels = c.kernel_ir.kernels
    # the matmul: the kernel 003 split, else the last kernel (the projection ends the program)
    split_names = [k.name for k in c.tile_ir.kernels if k.split_k is not None]
    main = next((k for k in kernels if k.name in split_names), [k for k in kernels if not k.reduces_for][-1])
    reducers = [k for k in kernels if k.reduces_for == main.name]
    split = next((k.split_k for k in c.tile_ir.kernels if k.name == main.name), None)
    ws = next((b for b in c.tile_ir.written if split and b.name == split.workspace), None)
    blocks = main.grid[0] * main.grid[1] * main.grid[2]
    red = reducers[0].grid[0] if reducers else 0
    atomic = "atomic" if "atomic" in str(c.cuda) else "-"
    return (f"{e.name:<36} {split.splits if split else 1:>6} {blocks:>7} {red:>8} "
            f"{(ws.type.numel * 4 if ws else 0):>10} {atomic:>7}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="")
    ap.add_argument("--splits", type=int, default=None, help="force 003_split_matmul_k.splits")
    args = ap.parse_args()
    config = {} if args.splits is None else {"003_split_matmul_k.splits": args.splits}
    entries = [e for e in suite_entries() if e.op in MATMUL_OPS and e.seq in (32, 128) and args.filter in e.name]
    print(f"{'entry':<36} {'splits':>6} {'blocks':>7} {'reducer':>8} {'ws bytes':>10} {'atomic':>7}")
    for e in entries:
        print(row(e, config), flush=True)


if __name__ == "__main__":
    main()
