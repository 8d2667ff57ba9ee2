"""The search space of one Loop-IR kernel: the scheduling passes' knobs, as a tree.

Level i of the tree is pass i (in the order of deplokit/passes/schedule). A node holds the
kernel as passes 1..i-1 scheduled it; its options are the *distinct* kernels pass i makes
from it over the cross-product of the pass's knob domains (read from the pass's KNOBS,
nowhere else; a pass with several knobs decides them one at a time). Knob values the pass's
own legality checks turn down or shrink (a Skip, a register block halved to fit shared
memory, a split count that does not divide K) give a kernel some other value gives too, so
they are one option, named by the default value when it is among them (else the one closest
to the default). Passes with a single option are walked through
without a decision. A leaf is a complete schedule; its config names every knob of every pass,
so `deplokit.compile(..., config=...)` rebuilds exactly that kernel.

    space = KernelSpace(loop_program, "merged_rms_norm", target)
    space.size()                  # number of distinct schedules (leaves)
    leaf = space.default_leaf()   # the passes' own heuristics
    leaf.config                   # (("001_tileify..."...), ...) knob -> value
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from ..errors import DeplokitError
from ..ir.loop_ir import LoopProgram
from ..ir.structural import structural_hash
from ..ir.tile_ir import TileKernel, TileProgram
from ..passes.record import Skip
from ..passes.repack.repack import with_workspaces
from ..passes.repack.repack import workspace_buffer as repack_workspace
from ..passes.schedule import SCHEDULE
from ..passes.schedule.t001_tileify import as_tile_program
from ..passes.schedule.t003_split_matmul_k import PASS as SPLIT_PASS
from ..passes.schedule.t003_split_matmul_k import counter_buffer, reducer, workspace_buffer
from ..passes.schedule.t011_tma_copy import PASS as TMA_PASS

DEPTH = len(SCHEDULE)


@dataclass(frozen=True)
class Position:
    """A node of the tree: passes 1..depth scheduled `kernel`; of pass depth+1's knobs, those
    in `partial` (short name -> value) are decided, the next one is to decide."""
    depth: int
    kernel: TileKernel
    partial: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Option:
    """One distinct choice at a position: the knob value(s) that name it, where it leads, and
    how many knob combinations it stands for."""
    knobs: tuple[tuple[str, object], ...]      # ("005_blockify_launch.block_threads", 128)
    after: Position
    combinations: int = 1


@dataclass(frozen=True)
class Leaf:
    config: tuple[tuple[str, object], ...]     # every knob of every pass, in pass order
    kernel: TileKernel                         # the scheduled Tile-IR kernel

    def config_for(self, kernel_name: str) -> dict:
        """The config keyed for one kernel of a program: {"name:NNN_pass.knob": value}."""
        return {f"{kernel_name}:{k}": v for k, v in self.config}


_RUNS: dict = {}          # (pass, kernel, target, knobs, types) -> the kernel after it, or None
_RUNS_LIMIT = 20000


class KernelSpace:
    """The knob tree of kernel `kernel_name` of `program` (Loop IR) for `target`.

    A pass with several knobs (008: tm, tn, layout) is one decision per knob, in declaration
    order, so the search learns about each knob separately: values of a knob that lead to the
    same kernels whatever the later knobs are merged; the last knob's values are merged when
    they give the same kernel."""

    def __init__(self, program: LoopProgram, kernel_name: str, target, fixed: dict | None = None,
                 start: dict | None = None):
        self.program = as_tile_program(program)
        self.fixed = dict(fixed or {})      # "NNN_pass.knob" -> value: knobs held out of the search
        # a compile config ("NNN_pass.knob" or "kernel:NNN_pass.knob" -> value): where the search
        # starts (option 0, the default leaf) in place of the passes' heuristics; still searched
        self.start = dict(start or {})
        self.kernel_name = kernel_name
        self.target = target
        self.types = self.program.types()
        self._types_key = tuple(sorted(self.types.items()))
        self.root = Position(0, self.program.kernel(kernel_name))
        self.key = structural_hash(program.kernel(kernel_name), program.types())
        self._results: dict[tuple[int, TileKernel], list] = {}
        self._options: dict[Position, tuple[Option, ...]] = {}

    # -- the tree --------------------------------------------------------------------------
    def results(self, depth: int, kernel: TileKernel) -> list:
        """[(knob combination, kernel after pass `depth` or None if refused)] over the pass's
        domains, the default first and then by how few knobs differ from it; memoised."""
        memo = (depth, kernel)
        if memo not in self._results:
            p = SCHEDULE[depth]
            label, knobs = p.name, p.knobs
            default = p.knob_values(kernel, self.target, self.start)
            default.update({n: self.fixed[f"{label}.{n}"] for n in default if f"{label}.{n}" in self.fixed})
            domains = [(self.fixed[f"{label}.{k.name}"],) if f"{label}.{k.name}" in self.fixed
                       else k.search_domain(kernel, self.target) for k in knobs]
            combos = [dict(zip((k.name for k in knobs), values)) for values in itertools.product(*domains)]
            order = sorted(range(len(combos)), key=lambda i: (sum(combos[i][n] != v for n, v in default.items()), i))
            out = [(combos[i], self._run(p, kernel, combos[i])) for i in order]
            if all(after is None for _, after in out):
                raise DeplokitError(f"pass {label} refuses every knob value on kernel {kernel.name}")
            self._results[memo] = out
        return self._results[memo]

    def options(self, pos: Position) -> tuple[Option, ...]:
        """The distinct choices at `pos`; memoised."""
        if pos not in self._options:
            self._options[pos] = self._expand(pos)
        return self._options[pos]

    def _expand(self, pos: Position) -> tuple[Option, ...]:
        p = SCHEDULE[pos.depth]
        label, knobs = p.name, p.knobs
        decided = dict(pos.partial)
        consistent = [(c, after) for c, after in self.results(pos.depth, pos.kernel)
                      if after is not None and all(c[n] == v for n, v in decided.items())]
        j = len(pos.partial)
        groups: dict = {}
        if j >= len(knobs) - 1:             # the last knob (or none): one option per distinct kernel
            for combo, after in consistent:
                value = ((knobs[j].name, combo[knobs[j].name]),) if knobs else ()
                groups.setdefault(after.body, [value, Position(pos.depth + 1, after), 0])[2] += 1
        else:                               # an earlier knob: values alike in every completion merge
            name = knobs[j].name
            values = list(dict.fromkeys(c[name] for c, _ in consistent))
            for v in values:
                outcome = tuple(after.body for c, after in consistent if c[name] == v)
                groups.setdefault(outcome, [((name, v),), Position(pos.depth, pos.kernel, pos.partial + ((name, v),)),
                                            0])[2] += 1
        return tuple(Option(tuple((f"{label}.{n}", v) for n, v in value), after, count)
                     for value, after, count in groups.values())

    def _run(self, p, kernel: TileKernel, knobs: dict) -> TileKernel | None:
        # shared by every space of the session: the notebook's space table and the tune after it
        # (and a second tune of the same kernel) apply the same passes to the same kernels
        try:
            memo = (p.name, kernel, self.target, tuple(knobs.items()), self._types_key)
            hash(memo)
        except TypeError:       # an unhashable target or type: not memoised
            memo = None
        if memo is not None and memo in _RUNS:
            return _RUNS[memo]
        try:
            result, _ = p.apply_to(kernel, self.target, knobs, with_workspaces(self.types, kernel))
            after = kernel if isinstance(result, Skip) else result
        except DeplokitError:
            after = None        # a pass refusing a value outright: not part of the space
        if memo is not None:
            if len(_RUNS) >= _RUNS_LIMIT:
                _RUNS.clear()
            _RUNS[memo] = after
        return after

    def forced(self, pos: Position, config: list) -> Position:
        """Walk through decisions with a single option from `pos` on, appending their knobs to
        `config`; returns the first position with a choice to make (or a leaf's)."""
        while pos.depth < DEPTH:
            opts = self.options(pos)
            if len(opts) > 1:
                break
            config.extend(opts[0].knobs)
            pos = opts[0].after
        return pos

    def in_effect(self, config) -> tuple[tuple[str, object], ...]:
        """The knobs of a leaf's `config` its kernel depends on: those where another value (the
        pass's other knobs as in `config`) gives a different kernel or a refusal. A matmul knob
        on a row reduction, or 005's block_threads where 004 already shaped the block, is not."""
        values, kernel, out = dict(config), self.root.kernel, []
        for depth, p in enumerate(SCHEDULE):
            chosen = {k.name: values.get(f"{p.name}.{k.name}") for k in p.knobs}
            results = self.results(depth, kernel)
            after = next((a for c, a in results if c == chosen), None)
            if after is None:
                raise DeplokitError(f"{p.name}: {chosen} is not a schedule of kernel {self.kernel_name}")
            for k in p.knobs:
                others = [a for c, a in results if c[k.name] != chosen[k.name]
                          and all(c[n] == v for n, v in chosen.items() if n != k.name)]
                if any(a is None or a.body != after.body for a in others):
                    out.append((f"{p.name}.{k.name}", chosen[k.name]))
            kernel = after
        return tuple(out)

    # -- leaves ------------------------------------------------------------------------------
    def _walk(self, pick) -> tuple[tuple[int, ...], Leaf]:
        path, config = [], []
        pos = self.forced(self.root, config)
        while pos.depth < DEPTH:
            opts = self.options(pos)
            i = pick(len(path), opts)
            path.append(i)
            config.extend(opts[i].knobs)
            pos = self.forced(opts[i].after, config)
        return tuple(path), Leaf(tuple(config), pos.kernel)

    def leaf_of(self, choices) -> Leaf:
        """The leaf reached by picking option index choices[i] at the i-th decision."""
        choices = list(choices)

        def pick(i, opts):
            if i >= len(choices):
                raise DeplokitError(f"too few choices for kernel {self.kernel_name}")
            return choices[i]
        path, leaf = self._walk(pick)
        if len(path) != len(choices):
            raise DeplokitError(f"too many choices for kernel {self.kernel_name}")
        return leaf

    def default_leaf(self) -> Leaf:
        """Option 0 (the default's group) at every decision: the passes' own heuristics, or
        where `start` names a knob, its value there (the config a compilation was made with)."""
        return self._walk(lambda i, opts: 0)[1]

    def random_leaf(self, rng: random.Random) -> tuple[tuple[int, ...], Leaf]:
        """A leaf reached by a uniform choice at every decision, with its choice path."""
        return self._walk(lambda i, opts: rng.randrange(len(opts)))

    def leaves(self, limit: int | None = None):
        """Every leaf (depth first, defaults first) as (choice path, Leaf); at most `limit`."""
        count = 0

        def visit(pos, path, config):
            nonlocal count
            config = list(config)
            pos = self.forced(pos, config)
            if pos.depth >= DEPTH:
                count += 1
                yield tuple(path), Leaf(tuple(config), pos.kernel)
                return
            for i, opt in enumerate(self.options(pos)):
                if limit is not None and count >= limit:
                    return
                yield from visit(opt.after, path + [i], config + list(opt.knobs))
        yield from visit(self.root, [], [])

    def size(self, limit: int = 100_000) -> int:
        """Number of distinct schedules, counted up to `limit`."""
        return sum(1 for _ in self.leaves(limit))

    def estimate_size(self, probes: int = 400, seed: int = 0) -> float:
        """Knuth's estimate of size() from `probes` random root-to-leaf walks: the product of
        the option counts along a uniformly random walk is an unbiased estimate of the
        number of leaves. Seconds where size() takes minutes on a matmul (every leaf costs
        pass applications); the same seed gives the same estimate."""
        rng = random.Random(seed)
        total = 0.0
        for _ in range(probes):
            product = 1

            def pick(i, opts):
                nonlocal product
                product *= len(opts)
                return rng.randrange(len(opts))
            self._walk(pick)
            total += product
        return total / probes

    def raw_combinations(self) -> int:
        """Knob combinations before pruning: the raw cross-product of every pass's domains (the
        values the tuner may search for this kernel: Knob.searched)."""
        n = 1
        for p in SCHEDULE:
            for k in p.knobs:
                n *= 1 if f"{p.name}.{k.name}" in self.fixed else len(k.search_domain(self.root.kernel, self.target))
        return n

    def program_with(self, leaf: Leaf) -> TileProgram:
        """A Tile program holding this kernel, scheduled as `leaf` (to materialise it), and
        every kernel it brings: a repacking leaf runs after 011's repack kernels, which fill its
        workspaces; a split-K leaf writes 003's workspace and is followed by its reducer,
        scheduled by the passes after 003 with their defaults, as the pipeline schedules it.
        The model objective prices them all."""
        written = self.program.written
        split = leaf.kernel.split_k
        after = ()
        if split is not None and split.workspace not in self.types:
            out = self.types[self.program.kernel(self.kernel_name).outputs[0]]
            written += (workspace_buffer(split, out),)
            if split.in_kernel:       # its last block per tile reduces: counters, no reducer
                written += (counter_buffer(split, out),)
            else:
                after = (self.reducer_of(leaf, written[-1]),)
        types, repacks = self.types, [r for r in leaf.kernel.repacks if r.workspace not in self.types]
        written += tuple(repack_workspace(r, types[r.tensor].dtype) for r in repacks)
        kernels = tuple(TMA_PASS.repack_kernel(r, types[r.tensor], leaf.kernel.name, self.target, types)
                        for r in repacks)
        return TileProgram(self.program.buffers, written, kernels + (leaf.kernel,) + after, self.program.outputs)

    def reducer_of(self, leaf: Leaf, workspace) -> TileKernel:
        """The split-K reducer of `leaf`'s kernel: 003's `reducer` of the kernel as 003 read it
        (passes before it with the leaf's knobs), scheduled by the passes after 003 with their
        default knobs (a kernel of its own name: no knob of the leaf's config is its)."""
        config = dict(leaf.config)
        at = SCHEDULE.index(SPLIT_PASS)
        kernel = self.root.kernel
        for p in SCHEDULE[:at]:
            knobs = {k.name: config.get(f"{p.name}.{k.name}", d)
                     for k, d in zip(p.knobs, p.knob_values(kernel, self.target, {}).values())}
            kernel = self._run(p, kernel, knobs) or kernel
        types = dict(self.types, **{workspace.name: workspace.type})
        red = reducer(kernel, leaf.kernel.split_k)
        for p in SCHEDULE[at + 1:]:
            result, _ = p.apply_to(red, self.target, p.knob_values(red, self.target, {}), types)
            if not isinstance(result, Skip):
                red = result
        return red


def kernel_spaces(program: LoopProgram, target, start: dict | None = None) -> list[KernelSpace]:
    """One space per structurally distinct kernel of `program`, in launch order: kernels equal up
    to tensor names (28 identical decoder layers) are tuned once; `start`: see KernelSpace."""
    seen, out = set(), []
    for k in program.kernels:
        space = KernelSpace(program, k.name, target, start=start)
        if space.key not in seen:
            seen.add(space.key)
            out.append(space)
    return out
