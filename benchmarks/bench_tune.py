"""SP-MCTS against random search and the passes' default heuristics, on knob spaces small
enough to search exhaustively.

For each program every schedule of its kernel (a few knobs held fixed where the full space
is too large to enumerate here) is priced with the `model` objective (no GPU
here; without ptxas, so registers are the model's estimate), which gives the exhaustive best.
Then each search runs as the tuner runs it (the default schedule first) with 20 seeds, and we
count the trials it needs before one lands within 5% of the exhaustive best.

    python benchmarks/bench_tune.py [--seeds 20] [--max-leaves 4000]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import deplokit
from deplokit.tune.mcts import SPMCTS
from deplokit.tune.objective import ModelObjective, TrialFailed
from deplokit.tune.random_search import StopSearch, random_search
from deplokit.tune.space import KernelSpace


def programs():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    return {
        "rms_norm (1,32,2048)": (nn.RMSNorm(2048), (r(1, 32, 2048),)),
        "softmax (3,5,1000)": (nn.Softmax(dim=-1), (r(3, 5, 1000),)),
        "layer_norm (64,4096)": (nn.LayerNorm(4096), (r(64, 4096),)),
        "matmul 37x129x13": (lambda a, b: a @ b, (r(37, 129), r(129, 13))),
        "relu(x+b)@w 16x64x16": (lambda x, b, w: torch.relu((x + b) @ w), (r(16, 64), r(64), r(64, 16))),
        # 44,640 schedules in full: K chunk and split-K held at 16 and 1 leave 2,232.
        "matmul 128x128x128 (BK 16, no split-K)": (lambda a, b: a @ b, (r(128, 128), r(128, 128)),
                                                 {"002_chunk_matmul_k.k_chunk": 16, "003_split_matmul_k.splits": 1}),
        "matmul 256x64x32 (BK 16)": (lambda a, b: a @ b, (r(256, 64), r(64, 32)), {"002_chunk_matmul_k.k_chunk": 16}),
    }


class Lookup:
    """The search's evaluate callback: the exhaustive table, counting trials until a hit."""

    def __init__(self, costs: dict, target_cost: float):
        self.costs, self.target_cost = costs, target_cost
        self.trials, self.hit, self.seen = 0, None, set()

    def __call__(self, leaf):
        if leaf.kernel.body in self.seen:       # as the tuner: one trial per distinct kernel
            return self.costs[leaf.config]
        self.seen.add(leaf.kernel.body)
        self.trials += 1
        cost = self.costs[leaf.config]
        if cost is not None and cost <= self.target_cost and self.hit is None:
            self.hit = self.trials
            raise StopSearch
        return cost


def trials_to_hit(space, costs, target_cost, search: str, seed: int) -> int | None:
    ev = Lookup(costs, target_cost)
    try:
        default_cost = ev(space.default_leaf())
        if search == "mcts":
            tree = SPMCTS(space, seed=seed)
            tree.reference = default_cost
            tree.run(ev, max_iterations=20 * len(costs))
        else:
            random_search(space, ev, seed=seed, max_iterations=20 * len(costs))
    except StopSearch:
        pass
    return ev.hit


def summary(hits: list) -> str:
    found = [h for h in hits if h is not None]
    if not found:
        return "never"
    miss = f", {len(hits) - len(found)} missed" if len(found) < len(hits) else ""
    return f"median {statistics.median(found):g}, mean {statistics.mean(found):.1f}, worst {max(found)}{miss}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--max-leaves", type=int, default=4000)
    args = ap.parse_args()
    rows = []
    for name, (fn, inputs, *fixed) in programs().items():
        c = deplokit.compile(fn, *inputs)
        loop_kernel = c.loop_ir.kernels[0].name
        space = KernelSpace(c.loop_ir, loop_kernel, c.target, fixed=fixed[0] if fixed else None)
        model = ModelObjective(c.target, ptxas=False)
        t0 = time.perf_counter()
        costs = {}
        for _, leaf in space.leaves(args.max_leaves):
            try:
                costs[leaf.config] = model(space, leaf)
            except TrialFailed:
                costs[leaf.config] = None
        if len(costs) >= args.max_leaves:
            print(f"{name}: more than {args.max_leaves} schedules, skipped")
            continue
        elapsed = time.perf_counter() - t0
        kernels = len({leaf.kernel.body for _, leaf in space.leaves(args.max_leaves)})
        best = min(v for v in costs.values() if v is not None)
        default = costs[space.default_leaf().config]
        within = best * 1.05
        mcts = [trials_to_hit(space, costs, within, "mcts", s) for s in range(args.seeds)]
        rand = [trials_to_hit(space, costs, within, "random", s) for s in range(args.seeds)]
        rows.append((name, kernels, best, default, mcts, rand))
        print(f"{name}: {len(costs)} configs ({kernels} distinct kernels) priced in {elapsed:.1f} s; "
              f"exhaustive best {best:.2f} µs, "
              f"default {default:.2f} µs ({default / best:.2f}x the best)")
        near = sum(1 for _, leaf in space.leaves(args.max_leaves) if costs[leaf.config] is not None
                   and costs[leaf.config] <= within)
        print(f"    {near} configs within 5% of the best; trials (distinct kernels) to reach one over "
              f"{args.seeds} seeds (the default counts as trial 1):")
        print(f"    SP-MCTS: {summary(mcts)}")
        print(f"    random:  {summary(rand)}")
        print(f"    default heuristics: {'within 5% (1 trial)' if default <= within else 'not within 5%'}")
    print()
    print("| program | distinct kernels | best µs (model) | default / best | SP-MCTS trials (median / mean) "
          "| random trials (median / mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, n, best, default, mcts, rand in rows:
        def med(h):
            f = [x for x in h if x is not None]
            return f"{statistics.median(f):g} / {statistics.mean(f):.1f}" if f else "never"
        print(f"| {name} | {n} | {best:.2f} | {default / best:.2f}x | {med(mcts)} | {med(rand)} |")


if __name__ == "__main__":
    main()
