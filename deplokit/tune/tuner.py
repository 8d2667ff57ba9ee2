"""Tune a compiled program: one search per structurally distinct kernel, every trial cached.

    result = tune_compilation(c, budget=64, objective="model", listener=print, cache="tune.db")
    c2 = c.recompile(result.best_config)

For each kernel (keyed by its structural hash) the passes' default schedule is evaluated
first, then the search (SP-MCTS, or random search) spends the rest of `budget` trials. A
trial found in the cache is read back, never run again, and counts toward the budget, so a
run interrupted by Ctrl-C resumes where it stopped and a finished run repeats for free. A
config that builds a kernel an earlier trial already built takes that trial's cost (no trial).
`patience`: stop a kernel's search after that many trials without a better one.
"""
from __future__ import annotations

import hashlib

from ..errors import DeplokitError
from ..ir.structural import structural_hash
from ..passes.schedule import SCHEDULE
from .cache import TuneCache
from .mcts import SPMCTS
from .objective import TrialFailed, make_objective
from .random_search import StopSearch, random_search
from .result import Trial, TuneResult
from .space import KernelSpace, kernel_spaces

SEARCHES = ("mcts", "random")


def program_key(spaces) -> str:
    return hashlib.sha256(" ".join(s.key for s in spaces).encode()).hexdigest()[:16]


def open_cache(cache) -> TuneCache:
    if isinstance(cache, TuneCache):
        return cache
    return TuneCache(cache)


class _KernelRun:
    """Evaluates leaves of one kernel's space: cache first, then the objective; emits Trials."""

    def __init__(self, space: KernelSpace, objective, cache: TuneCache, target: str, budget: int,
                 patience: int | None, history: list, listener):
        self.space, self.objective, self.cache, self.target = space, objective, cache, target
        self.budget, self.patience, self.history, self.listener = budget, patience, history, listener
        self.costs: dict[tuple, float | None] = {}
        self.by_kernel: dict[tuple, float | None] = {}     # kernel body -> cost: two configs, one kernel
        self.trials = 0
        self.best: float | None = None
        self.since_best = 0

    def __call__(self, leaf, default: bool = False) -> float | None:
        if leaf.config in self.costs:
            return self.costs[leaf.config]
        if leaf.kernel.body in self.by_kernel:          # another config already built this kernel
            self.costs[leaf.config] = self.by_kernel[leaf.kernel.body]
            return self.costs[leaf.config]
        if self.trials >= self.budget or (self.patience and self.since_best >= self.patience):
            raise StopSearch
        found = self.cache.lookup(self.space.key, self.target, self.objective.name, leaf.config)
        if found is not None:
            cost, ok, error, cached = found.cost_us, found.ok, found.error, True
        else:
            try:
                cost, ok, error = self.objective(self.space, leaf), True, ""
            except TrialFailed as e:
                cost, ok, error = None, False, str(e)
            self.cache.record(self.space.key, self.target, self.objective.name, leaf.config, cost, ok, error)
            cached = False
        self.trials += 1
        if ok and cost is not None and (self.best is None or cost < self.best):
            self.best, self.since_best = cost, 0
        else:
            self.since_best += 1
        self.costs[leaf.config] = self.by_kernel[leaf.kernel.body] = cost if ok else None
        trial = Trial(len(self.history), leaf.config, cost if ok else None, self.best, ok, error, cached,
                      self.space.kernel_name, default)
        self.history.append(trial)
        if self.listener is not None:
            self.listener(trial)
        return self.costs[leaf.config]


def tune_compilation(compilation, budget: int = 64, objective: str = "model", listener=None, cache=None,
                     search: str = "mcts", seed: int = 0, patience: int | None = None,
                     ptxas: bool | None = None, c: float = 0.7, d: float = 0.05) -> TuneResult:
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise DeplokitError(f"budget must be a positive number of trials, got {budget!r}")
    if search not in SEARCHES:
        raise DeplokitError(f"unknown search {search!r}; supported: {', '.join(SEARCHES)}")
    store = open_cache(cache)
    try:
        target = compilation.target
        obj = make_objective(objective, compilation, store, ptxas)
        spaces = kernel_spaces(compilation.loop_ir, target)
        types = compilation.loop_ir.types()
        sharing = {s.key: tuple(k.name for k in compilation.loop_ir.kernels
                                if structural_hash(k, types) == s.key) for s in spaces}
        history: list[Trial] = []
        for space in spaces:
            run = _KernelRun(space, obj, store, target.name, budget, patience, history, listener)
            try:
                default_cost = run(space.default_leaf(), default=True)
                if search == "mcts":
                    tree = SPMCTS(space, c=c, d=d, seed=seed)
                    tree.reference = default_cost
                    tree.run(run, max_iterations=50 * budget)
                else:
                    random_search(space, run, seed=seed, max_iterations=50 * budget)
            except StopSearch:
                pass
        default = next((t for t in history if t.default), None)
        return TuneResult(program_key(spaces), target.name, objective, tuple(history), default,
                          tuple((s.kernel_name, sharing[s.key]) for s in spaces))
    finally:
        if store is not cache:
            store.close()


def tuned_config(program, target, cache=None) -> tuple[dict, int, list[str]]:
    """(config, kernels it schedules, notes) from the best cached trials of the kernels of
    `program` (Loop IR) for `target`; ({}, 0, notes) when the cache has none. Never creates a
    cache file; a corrupt one is set aside."""
    store = cache if isinstance(cache, TuneCache) else TuneCache(cache, create=False)
    domains = {f"{p.name}.{k.name}": k.domain for p in SCHEDULE for k in p.knobs}
    config, count = {}, 0
    try:
        types = program.types()
        for k in program.kernels:
            found = store.best(structural_hash(k, types), target.name)
            if found is None:
                continue
            knobs = dict(found[1].config)
            if any(name not in domains or value not in domains[name] for name, value in knobs.items()):
                store.notes.append(f"ignored the cached config of {k.name}: its knobs are not the passes' knobs")
                continue
            config.update({f"{k.name}:{n}": v for n, v in knobs.items()})
            count += 1
        return config, count, list(store.notes)
    finally:
        if store is not cache:
            store.close()
