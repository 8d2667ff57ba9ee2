"""A model-guided search over a kernel's knob tree, in the manner of Bayesian optimisation:
a surrogate model of the trials so far picks which schedule to evaluate next.

SP-MCTS spends most of its evaluations on leaves a model of the earlier ones could have told
were poor (emmy measured over 90% of its MCTS trials at 2x or more from the best). Here:

    pool        draw POOL distinct random schedules (tune/space.py's random walks), refilled
                by one after each trial, so the choice is among many, never just the next draw
    surrogate   the log cost of an unseen schedule is predicted by kernel regression over the
                evaluated ones: weights exp(-d / LENGTH), d = how many knobs differ
                (Nadaraya-Watson with a Hamming kernel); its uncertainty falls with the total
                weight of the evaluated neighbours
    acquire     evaluate the pooled schedule with the lowest  mean - KAPPA * spread * uncertainty
                (a lower confidence bound: a schedule near good ones, or far from any seen)

The first WARMUP trials are taken in draw order (random search) to give the model something
to fit; a failed trial counts as twice the worst cost seen. Everything is seeded and ties go
to the earlier draw, so a seed gives the same trials every run."""
from __future__ import annotations

import math
import random

from .space import KernelSpace

POOL, WARMUP, LENGTH, KAPPA = 48, 4, 1.5, 1.0


def predict(config: tuple, seen: dict, length: float = LENGTH) -> tuple[float, float]:
    """(mean, uncertainty in 0..1] of the log cost at `config` from `seen` (config -> log cost)."""
    values = dict(config)
    total = weighted = 0.0
    for other, y in seen.items():
        distance = sum(values.get(k) != v for k, v in other)
        w = math.exp(-distance / length)
        total += w
        weighted += w * y
    mean = weighted / total if total else 0.0
    return mean, 1.0 / math.sqrt(1.0 + total)


def surrogate_search(space: KernelSpace, evaluate, seed: int = 0, max_iterations: int = 1 << 30,
                     pool: int = POOL, warmup: int = WARMUP, kappa: float = KAPPA, redraws: int = 64) -> None:
    """`evaluate(leaf)` returns the cost in µs or None; raises StopSearch to end the search."""
    rng = random.Random(seed)
    costs: dict[tuple, float | None] = {}
    candidates: dict[tuple, object] = {}           # drawn, not evaluated, in draw order

    def refill():
        for _ in range(redraws):
            if len(candidates) >= pool:
                return
            _, leaf = space.random_leaf(rng)
            if leaf.config not in costs:
                candidates.setdefault(leaf.config, leaf)

    for _ in range(max_iterations):
        refill()
        if not candidates:
            return                                  # (nearly) everything has been drawn
        ok = {c: math.log(v) for c, v in costs.items() if v}
        if len(ok) < warmup:
            config = next(iter(candidates))
        else:
            worst = max(ok.values()) + math.log(2.0)
            seen = {c: ok.get(c, worst) for c in costs}
            spread = (max(ok.values()) - min(ok.values())) or 1.0
            scores = {c: (lambda m, u: m - kappa * spread * u)(*predict(c, seen)) for c in candidates}
            config = min(candidates, key=lambda c: scores[c])    # min keeps the first of equals
        leaf = candidates.pop(config)
        costs[config] = evaluate(leaf)
