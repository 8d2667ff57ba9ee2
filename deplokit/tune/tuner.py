"""Tune a compiled program: one search per structurally distinct kernel, every trial cached.

    result = tune_compilation(c, budget=64, objective="model", listener=print, cache="tune.db")
    c2 = c.recompile(result.best_config)

For each kernel (keyed by its structural hash) the schedule the compilation was made with
(the passes' defaults, or the knobs its `config` set) is evaluated first, then the search
(SP-MCTS, random search, or tune/surrogate_search.py's model-guided one) spends the rest of
`budget` trials. A trial found in the cache is read back, never run again, and counts toward
the budget, so a run interrupted by Ctrl-C resumes where it stopped and a finished run repeats for free. A
config that builds a kernel an earlier trial already built takes that trial's cost (no trial).
`patience`: stop a kernel's search after that many trials without a better one.

First the program-level choices (tune/program_space.py: fuse attention or not, fuse rows,
split a reduction) are compared, each distinct program priced as the sum of its kernels'
default schedules (the gpu objective times it whole); each is one program trial, cached under
the program's key like a kernel's. The kernels of the cheapest program are then tuned; its
choice is part of `best_config`, and compile reads it back from the cache before it fuses.
"""
from __future__ import annotations

import dataclasses
import hashlib

from ..errors import DeplokitError
from ..ir.structural import structural_hash
from ..passes.record import in_domain
from ..passes.schedule import SCHEDULE
from .cache import TuneCache
from .mcts import SPMCTS
from .objective import TrialFailed, make_objective
from .program_space import PROGRAM_KNOBS, ProgramSpace
from .program_space import program_key as choices_key
from .random_search import StopSearch, random_search
from .result import PROGRAM, Trial, TuneResult
from .space import KernelSpace, kernel_spaces
from .surrogate_search import surrogate_search

SEARCHES = ("mcts", "random", "surrogate")


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
        self.own: list[Trial] = []

    def adopt(self, earlier: "_KernelRun") -> None:
        """Continue `earlier` (the same space's run that priced a program-level option): its
        trials count, join this run's history and reach the listener now."""
        self.costs, self.by_kernel = dict(earlier.costs), dict(earlier.by_kernel)
        self.trials, self.best, self.since_best = earlier.trials, earlier.best, earlier.since_best
        for t in earlier.own:
            self.own.append(dataclasses.replace(t, index=len(self.history), kernel=self.space.kernel_name))
            self.history.append(self.own[-1])
            if self.listener is not None:
                self.listener(self.own[-1])

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
        self.own.append(trial)
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
        priced: list[Trial] = []       # the default schedules that priced the program-level options
        runs: dict[str, _KernelRun] = {}

        def run_of(space):
            if space.key not in runs:
                runs[space.key] = _KernelRun(space, obj, store, target.name, budget, patience, priced, None)
            return runs[space.key]
        choice, programs = _choose_program(compilation, obj, store, run_of, listener)
        if choice is not None and hasattr(obj, "use_program"):
            obj.use_program(dict(choice.config))
        loop = compilation.loop_ir if choice is None else choice.program
        spaces = kernel_spaces(loop, target, start=compilation.config)   # trial 0: the config c was made with
        types = loop.types()
        sharing = {s.key: tuple(k.name for k in loop.kernels if structural_hash(k, types) == s.key) for s in spaces}
        history: list[Trial] = []      # the chosen program's kernels only
        for space in spaces:
            run = _KernelRun(space, obj, store, target.name, budget, patience, history, listener)
            if space.key in runs:
                run.adopt(runs[space.key])
            try:
                default_cost = run(space.default_leaf(), default=True)
                if search == "mcts":
                    tree = SPMCTS(space, c=c, d=d, seed=seed)
                    tree.reference = default_cost
                    tree.run(run, max_iterations=50 * budget)
                elif search == "surrogate":
                    surrogate_search(space, run, seed=seed, max_iterations=50 * budget)
                else:
                    random_search(space, run, seed=seed, max_iterations=50 * budget)
            except StopSearch:
                pass
        keys = {s.kernel_name for s in spaces}
        default = next((t for t in history if t.default and t.kernel in keys), None)
        result = TuneResult(program_key(spaces), target.name, objective, tuple(history), default,
                            tuple((s.kernel_name, sharing[s.key]) for s in spaces), programs,
                            () if choice is None else choice.config)
        effect = tuple((s.kernel_name, s.in_effect(result.best_for(s.kernel_name).config))
                       for s in spaces if result.best_for(s.kernel_name) is not None)
        return dataclasses.replace(result, in_effect=effect)
    finally:
        if store is not cache:
            store.close()


def _choose_program(compilation, obj, store, run_of, listener):
    """(the cheapest ProgramOption, its program trials); (None, ()) when the program-level
    knobs make one program only. A program whose kernel fails to build fails as a whole."""
    space = ProgramSpace(compilation)
    options = space.options()
    if len(options) < 2:
        return None, ()
    trials: list[Trial] = []
    best = None
    for i, option in enumerate(options):
        found = store.lookup(space.key, compilation.target.name, obj.name, option.config)
        if found is not None:
            cost, ok, error, cached = found.cost_us, found.ok, found.error, True
        else:
            try:
                cost, ok, error = _program_cost(compilation, option, obj, run_of), True, ""
            except (TrialFailed, StopSearch) as e:
                cost, ok, error = None, False, str(e) or "a kernel's default schedule was not priced"
            store.record(space.key, compilation.target.name, obj.name, option.config, cost, ok, error)
            cached = False
        if ok and (best is None or cost < best[1]):
            best = (option, cost)
        trials.append(Trial(len(trials), option.config, cost if ok else None, best and best[1], ok, error, cached,
                            PROGRAM, i == 0))
        if listener is not None:
            listener(trials[-1])
    return (options[0] if best is None else best[0]), tuple(trials)


def _program_cost(compilation, option, obj, run_of) -> float:
    """The option's cost: measured whole (gpu), or the sum of its kernels' default schedules."""
    if hasattr(obj, "program_cost"):
        return obj.program_cost(dict(option.config))
    costs = {}
    types = option.program.types()
    for space in kernel_spaces(option.program, compilation.target, start=compilation.config):
        costs[space.key] = run_of(space)(space.default_leaf(), default=True)
        if costs[space.key] is None:
            raise TrialFailed(f"kernel {space.kernel_name}'s default schedule failed")
    return sum(costs[structural_hash(k, types)] for k in option.program.kernels)


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


def tuned_choices(program, target, store: TuneCache) -> dict:
    """The best cached program-level choice for `program`, the Loop IR the first whole-program
    pass with knobs reads ({} if none, or if its knobs are not the passes' knobs any more)."""
    found = store.best(choices_key(program), target.name)
    if found is None:
        return {}
    knobs = dict(found[1].config)
    if any(name not in PROGRAM_KNOBS or not in_domain(value, PROGRAM_KNOBS[name]) for name, value in knobs.items()):
        store.notes.append("ignored the cached program-level choice: its knobs are not the passes' knobs")
        return {}
    return knobs
