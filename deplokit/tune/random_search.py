"""Random search over a kernel's knob tree: the baseline SP-MCTS is compared with.

Each trial finishes a schedule with a uniform choice at every decision of the tree
(tune/space.py); a schedule already evaluated is drawn again (a few times), so the trials are
distinct while distinct ones remain."""
from __future__ import annotations

import random

from .space import KernelSpace


class StopSearch(Exception):
    """Raised by an evaluate callback when the budget or the patience is spent."""


def random_search(space: KernelSpace, evaluate, seed: int = 0, max_iterations: int = 1 << 30,
                  redraws: int = 64) -> None:
    """`evaluate(leaf)` returns the cost in µs or None; raises StopSearch to end the search."""
    rng = random.Random(seed)
    seen: set = set()
    for _ in range(max_iterations):
        for _ in range(redraws):
            _, leaf = space.random_leaf(rng)
            if leaf.config not in seen:
                break
        else:
            return                                  # (nearly) everything has been drawn
        seen.add(leaf.config)
        evaluate(leaf)
