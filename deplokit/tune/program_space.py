"""The program-level choices: the knobs of the whole-program Loop-IR passes (fuse_attention,
fuse_rows, split_reduce, ...), which decide what kernels exist before any is scheduled.

Each pass with knobs is one decision: its knob combinations run on the program entering it,
and those that give the same program merge into one option, named by the combination nearest
the passes' defaults (as KernelSpace merges a scheduling pass's values). A program usually has
a handful of distinct options: attention fused or not, by the guard's cost or forced, a long
reduction split or not. Knobs the compile's config names are held fixed.

`key` names the program the choices start from (the one the first such pass reads, which no
program-level knob changes), so `compile` finds the tuned choice again before it fuses.

    space = ProgramSpace(compilation)
    for option in space.options():        # the defaults' program first
        option.config, option.program     # (("fuse_attention.enable", True), ...), its Loop IR
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

from ..errors import DeplokitError
from ..ir.loop_ir import LoopProgram
from ..ir.structural import structural_hash
from ..passes.front import FRONT
from ..passes.record import Pass
from ..trace import Context

# the whole-program passes that make the Loop IR the schedule starts from (lift ... dedup)
LOOP_PASSES = tuple(p for p in FRONT if isinstance(p, Pass) and p.stage == "loop")
FIRST_CHOICE = next(i for i, p in enumerate(LOOP_PASSES) if p.knobs)
PROGRAM_KNOBS = {f"{p.name}.{k.name}": k for p in LOOP_PASSES for k in p.knobs}
KEY_PREFIX = "program:"


def program_key(program: LoopProgram) -> str:
    """The cache key of a program's program-level choices: its kernels' structural hashes (two
    programs equal up to tensor names share it)."""
    types = program.types()
    text = " ".join(structural_hash(k, types) for k in program.kernels)
    return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]


def choice_input(trace) -> LoopProgram:
    """The program the first pass with program-level knobs read, from a compilation's trace."""
    name = LOOP_PASSES[FIRST_CHOICE].name
    return next(s.before for s in trace if s.name == name)


@dataclass(frozen=True)
class ProgramOption:
    config: tuple[tuple[str, object], ...]     # every program-level knob, in pipeline order
    program: LoopProgram                       # the Loop IR the schedule starts from (whole program)


class ProgramSpace:
    def __init__(self, compilation):
        self.target = compilation.target
        self.dedup = compilation._ctx.dedup
        self.fixed = {k: v for k, v in compilation._ctx.config.items() if k in PROGRAM_KNOBS}
        self.start = choice_input(compilation.trace)
        self.key = program_key(self.start)
        self._options: list[ProgramOption] | None = None

    def _combos(self, p: Pass, program) -> list[dict]:
        """The pass's knob combinations (full keys), the default first, then by how few knobs differ."""
        default = p.knob_values(program, self.target, self.fixed)
        domains = [(self.fixed[f"{p.name}.{k.name}"],) if f"{p.name}.{k.name}" in self.fixed else k.domain
                   for k in p.knobs]
        combos = [dict(zip((k.name for k in p.knobs), values)) for values in itertools.product(*domains)]
        combos.sort(key=lambda c: sum(c[n] != v for n, v in default.items()))     # stable: domain order next
        return [{f"{p.name}.{n}": v for n, v in c.items()} for c in combos]

    def options(self) -> list[ProgramOption]:
        """The distinct programs the choices make, the defaults' first; memoised."""
        if self._options is None:
            frontier = [((), self.start)]
            for p in LOOP_PASSES[FIRST_CHOICE:]:
                merged: list[tuple[tuple, LoopProgram]] = []
                for config, program in frontier:
                    for combo in self._combos(p, program) if p.knobs else [{}]:
                        try:
                            after = p.run(program, Context(self.target, combo, self.dedup)).after
                        except DeplokitError:
                            continue            # a value the pass refuses outright: not an option
                        if not any(after == seen for _, seen in merged):
                            merged.append((config + tuple(combo.items()), after))
                frontier = merged
            self._options = [ProgramOption(c, prog if prog.whole is None else prog.whole) for c, prog in frontier]
        return self._options
