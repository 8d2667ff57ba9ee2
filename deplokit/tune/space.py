"""The search space of one Loop-IR kernel: the 16 scheduling passes' knobs, as a tree.

Level i of the tree is pass i (in the order of deplokit/passes/schedule). A node holds the
kernel as passes 1..i-1 scheduled it; its options are the *distinct* kernels pass i makes
from it over the cross-product of the pass's knob domains (read from the pass's KNOBS, nowhere
else). Knob values the pass's own legality checks turn down or shrink (a Skip, a register
block halved to fit shared memory, a split count that does not divide K) give a kernel some
other value gives too, so they are one option, named by the default value when it is among
them (else the first in domain order). Passes with a single option are walked through
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
from ..passes.schedule import PASSES, _apply, initial, knobs_of, pass_label, resolve_knobs

DEPTH = len(PASSES)


@dataclass(frozen=True)
class Option:
    """One distinct outcome of a pass on a node: the knob values that name it, the kernel it
    makes, and how many knob combinations lead to it."""
    knobs: tuple[tuple[str, object], ...]      # ("005_blockify_launch.block_threads", 128), ...
    kernel: TileKernel
    combinations: int = 1


@dataclass(frozen=True)
class Leaf:
    config: tuple[tuple[str, object], ...]     # every knob of every pass, in pass order
    kernel: TileKernel                         # the scheduled Tile-IR kernel

    def config_for(self, kernel_name: str) -> dict:
        """The config keyed for one kernel of a program: {"name:NNN_pass.knob": value}."""
        return {f"{kernel_name}:{k}": v for k, v in self.config}


class KernelSpace:
    """The knob tree of kernel `kernel_name` of `program` (Loop IR) for `target`."""

    def __init__(self, program: LoopProgram, kernel_name: str, target):
        self.program = initial(program)
        self.kernel_name = kernel_name
        self.target = target
        self.types = self.program.types()
        self.root = self.program.kernel(kernel_name)
        self.key = structural_hash(program.kernel(kernel_name), program.types())
        self._options: dict[tuple[int, TileKernel], tuple[Option, ...]] = {}

    # -- the tree --------------------------------------------------------------------------
    def options(self, depth: int, kernel: TileKernel) -> tuple[Option, ...]:
        """The distinct outcomes of pass `depth` (0-based) on `kernel`; memoised."""
        memo = (depth, kernel)
        if memo not in self._options:
            self._options[memo] = self._expand(PASSES[depth], kernel)
        return self._options[memo]

    def _expand(self, mod, kernel: TileKernel) -> tuple[Option, ...]:
        label = pass_label(mod)
        knobs = knobs_of(mod)
        default = resolve_knobs(mod, kernel, self.target, {})
        combos = [dict(zip((k.name for k in knobs), values))
                  for values in itertools.product(*(k.domain for k in knobs))]
        # The default first, so that it names its group and the tree lists it first.
        combos.sort(key=lambda c: c != default)
        groups: dict[tuple, list] = {}
        for combo in combos:
            after = self._run(mod, kernel, combo)
            if after is None:
                continue
            groups.setdefault(after.body, [combo, after, 0])[2] += 1
        if not groups:
            raise DeplokitError(f"pass {label} refuses every knob value on kernel {kernel.name}")
        return tuple(Option(tuple((f"{label}.{n}", v) for n, v in combo.items()), after, count)
                     for combo, after, count in groups.values())

    def _run(self, mod, kernel: TileKernel, knobs: dict) -> TileKernel | None:
        from ..passes.schedule.knobs import Skip
        try:
            result = _apply(mod, kernel, self.target, knobs, self.types)
        except DeplokitError:
            return None         # a pass refusing a value outright: not part of the space
        if isinstance(result, Skip):
            return kernel
        return TileKernel(result.name, result.outputs, result.body,
                          result.knobs + tuple((f"{pass_label(mod)}.{n}", v) for n, v in knobs.items()))

    def forced(self, depth: int, kernel: TileKernel, config: list) -> tuple[int, TileKernel]:
        """Walk through passes with a single option from `depth` on, appending their knobs to
        `config`; returns the first depth with a choice to make (or DEPTH) and the kernel there."""
        while depth < DEPTH:
            opts = self.options(depth, kernel)
            if len(opts) > 1:
                break
            config.extend(opts[0].knobs)
            kernel = opts[0].kernel
            depth += 1
        return depth, kernel

    # -- leaves ------------------------------------------------------------------------------
    def leaf_of(self, choices) -> Leaf:
        """The leaf reached by picking option index choices[i] at the i-th decision."""
        config: list = []
        depth, kernel = self.forced(0, self.root, config)
        for c in choices:
            if depth >= DEPTH:
                raise DeplokitError(f"too many choices for kernel {self.kernel_name}")
            opt = self.options(depth, kernel)[c]
            config.extend(opt.knobs)
            depth, kernel = self.forced(depth + 1, opt.kernel, config)
        if depth < DEPTH:
            raise DeplokitError(f"too few choices for kernel {self.kernel_name}")
        return Leaf(tuple(config), kernel)

    def default_leaf(self) -> Leaf:
        """The passes' own heuristics: option 0 (the default's group) at every decision."""
        return self.leaf_of(self._default_path())

    def _default_path(self) -> list[int]:
        path, config = [], []
        depth, kernel = self.forced(0, self.root, config)
        while depth < DEPTH:
            path.append(0)
            opt = self.options(depth, kernel)[0]
            depth, kernel = self.forced(depth + 1, opt.kernel, config)
        return path

    def random_leaf(self, rng: random.Random) -> tuple[tuple[int, ...], Leaf]:
        """A leaf reached by a uniform choice at every decision, with its choice path."""
        path, config = [], []
        depth, kernel = self.forced(0, self.root, config)
        while depth < DEPTH:
            opts = self.options(depth, kernel)
            i = rng.randrange(len(opts))
            path.append(i)
            config.extend(opts[i].knobs)
            depth, kernel = self.forced(depth + 1, opts[i].kernel, config)
        return tuple(path), Leaf(tuple(config), kernel)

    def leaves(self, limit: int | None = None):
        """Every leaf (depth first, defaults first) as (choice path, Leaf); at most `limit`."""
        count = 0

        def visit(depth, kernel, path, config):
            nonlocal count
            config = list(config)
            depth, kernel = self.forced(depth, kernel, config)
            if depth >= DEPTH:
                count += 1
                yield tuple(path), Leaf(tuple(config), kernel)
                return
            for i, opt in enumerate(self.options(depth, kernel)):
                if limit is not None and count >= limit:
                    return
                yield from visit(depth + 1, opt.kernel, path + [i], config + list(opt.knobs))
        yield from visit(0, self.root, [], [])

    def size(self, limit: int = 100_000) -> int:
        """Number of distinct schedules, counted up to `limit`."""
        return sum(1 for _ in self.leaves(limit))

    def knob_count(self) -> int:
        """Knob combinations before pruning: the raw cross-product of every pass's domains."""
        n = 1
        for mod in PASSES:
            for k in knobs_of(mod):
                n *= len(k.domain)
        return n

    def program_with(self, leaf: Leaf) -> TileProgram:
        """A Tile program holding only this kernel, scheduled as `leaf` (to materialise it)."""
        return TileProgram(self.program.buffers, self.program.written, (leaf.kernel,), self.program.outputs)


def kernel_spaces(program: LoopProgram, target) -> list[KernelSpace]:
    """One space per structurally distinct kernel of `program`, in launch order: kernels equal up
    to tensor names (28 identical decoder layers) are tuned once."""
    seen, out = set(), []
    for k in program.kernels:
        space = KernelSpace(program, k.name, target)
        if space.key not in seen:
            seen.add(space.key)
            out.append(space)
    return out
