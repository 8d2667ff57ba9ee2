"""What a compilation remembers of its passes: the Context they ran in and one TraceStep each.

Below the passes (they import it; it imports no pass), above the IR. A step keeps its
before and after IR and, for a pass that works kernel by kernel, one Decision per kernel:
the knobs it ran with, or why it left the kernel alone, and a note on a choice it declined.
The CLI's -v / -vv, the notebook stepper and the tests read these fields; the text form
(`format_step`) is derived from them and is never parsed back."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .display import Displayable
from .target import Target


@dataclass(frozen=True)
class Context:
    """What every pass may read besides its input IR."""
    target: Target
    # "NNN_pass.knob" (every kernel) or "kernel:NNN_pass.knob" (one kernel) -> value; checked
    # against the passes' knobs before any pass runs (pipeline.validate_config)
    config: Mapping = field(default_factory=dict)
    dedup: bool = False          # schedule, materialise and render each unique kernel once
    # Knob values found for a program (the tune cache's best trials), keyed like `config`:
    # looked up once, with the Loop IR the schedule starts from; `config` wins over them. A
    # lookup with a `choices(program, target)` method also gives the program-level knobs,
    # asked with the program the first whole-program pass with knobs reads.
    tuned: Callable[[Any, Target], Mapping] | None = None
    # How float32 matmuls multiply: "float32" (exact) or "tf32" (deplokit/precision.py); 001
    # tileify records it on each contraction kernel (TileKernel.precision).
    precision: str = "float32"
    # Tile-IR passes of one's own (KernelPass records, stage "tile"), run in order after the 16
    # scheduling passes: the trace, the stepper and check_passes show them like the others.
    passes: tuple = ()
    _found: dict = field(default_factory=dict, compare=False, repr=False)

    def knob_config(self, program) -> Mapping:
        """The knob values the passes run with: `config` over the tuned values (whose lookup
        runs on the first call, the one lowering's Loop IR)."""
        if self.tuned is None:
            return self.config
        return self._over_tuned("tuned", program)

    def program_knob_config(self, program) -> Mapping:
        """The knob values the whole-program passes run with: `config` over the program-level
        choice tuned for `program` (looked up once, with the program the first such pass reads)."""
        if getattr(self.tuned, "choices", None) is None:
            return self.config
        return self._over_tuned("program", program, self.tuned.choices)

    def tuned_program_knobs(self, keys) -> dict:
        """Those of `keys` (whole-program knobs) whose value came from tuning, not from `config`."""
        found = self._found.get("program", {})
        return {k: found[k] for k in keys if k in found and k not in self.config}

    def _over_tuned(self, memo: str, program, lookup=None) -> Mapping:
        if memo not in self._found:
            self._found[memo] = dict((lookup or self.tuned)(program, self.target))
        given = set(self.config)
        # a knob the config names (for every kernel or for this one) is not taken from tuning
        tuned = {k: v for k, v in self._found[memo].items() if k not in given and k.partition(":")[2] not in given}
        return {**tuned, **self.config}


@dataclass(frozen=True)
class Decision:
    """What one pass did to one kernel."""
    kernel: str
    knobs: tuple[tuple[str, Any], ...] = ()   # the knob values it ran with (applied)
    skipped: str = ""                           # why it left the kernel as it was ('' if it ran)
    note: str = ""                              # a choice its knobs asked for and the kernel refused
    # the values the pass actually applied where they differ from `knobs` (None: no effect),
    # as the pass reported them (passes/record.py, Noted.used)
    used: tuple[tuple[str, Any], ...] = ()

    @property
    def applied(self) -> bool:
        return not self.skipped

    @property
    def in_effect(self) -> tuple[tuple[str, Any], ...]:
        """The knob values in effect: those given, replaced by what the pass used; a knob
        that had no effect left out."""
        used = dict(self.used)
        return tuple((k, used.get(k, v)) for k, v in self.knobs if used.get(k, v) is not None)

    def knob_text(self) -> str:
        """`block_threads=256→32, vector_width=4, thread_shape=16x16 (no effect)`: each knob's
        value, `requested→used` where the pass used another."""
        used = dict(self.used)
        return ", ".join(f"{k}={v}" if k not in used else f"{k}={v} (no effect)" if used[k] is None
                         else f"{k}={v}→{used[k]}" for k, v in self.knobs)


@dataclass(frozen=True)
class TraceStep(Displayable):
    stage: str                                  # the IR the step produces: torch, tensor, loop, ...
    name: str                                   # capture, decompose, 007_stage_inputs, ...
    before: Any = None
    after: Any = None
    decisions: tuple[Decision, ...] = ()        # per kernel, for a pass that runs kernel by kernel
    notes: tuple[str, ...] = ()                 # about the whole program (fusion, dedup)
    skipped_reason: str = ""                    # why the step changed nothing ('' if it ran)
    description: str = ""

    @property
    def changed(self) -> bool:
        return not self.skipped_reason and self.before != self.after

    @property
    def tag(self) -> str:
        """`t:007_stage_inputs` for a Tile-IR pass, `t:<stage>:<name>` for any other step."""
        return f"t:{self.name}" if self.stage == "tile" else f"t:{self.stage}:{self.name}"

    @property
    def params(self) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
        """(kernel, knobs) of every kernel the pass applied to, in kernel order."""
        return tuple((d.kernel, d.knobs) for d in self.decisions if d.applied)

    def decision(self, kernel: str) -> Decision | None:
        return next((d for d in self.decisions if d.kernel == kernel), None)

    @property
    def remarks(self) -> tuple[str, ...]:
        """Every explanation as a line: the program notes, then `kernel: why skipped`, then
        `kernel: note` (the `# ...` lines of -vv)."""
        return (self.notes + tuple(f"{d.kernel}: {d.skipped}" for d in self.decisions if d.skipped)
                + tuple(f"{d.kernel}: {d.note}" for d in self.decisions if d.note))

    def __str__(self) -> str:
        return "\n".join(format_step(self))


def _text(ir) -> str:
    return "" if ir is None else str(ir)


def format_step(step: TraceStep) -> list[str]:
    """One trace step as text: a unified diff of its before and after between `>>> TAG` and
    `<<< TAG` (knobs as `@@ kernel: k=v @@` lines, remarks as `# ...`), or the one line
    `--- TAG skipped: <reason>` for a step that changed nothing. The CLI's -vv prints this;
    `awk '/^>>> t:007/,/^<<< t:007/'` cuts one pass out."""
    if step.skipped_reason or _text(step.before) == _text(step.after):
        return [f"--- {step.tag} skipped: {step.skipped_reason or 'no change'}"]
    out = [f">>> {step.tag}"]
    for d in step.decisions:
        if d.applied:
            knob_text = d.knob_text()
            out.append(f"@@ {d.kernel}{': ' + knob_text if knob_text else ''} @@")
    out += [f"# {remark}" for remark in step.remarks]
    diff = difflib.unified_diff(_text(step.before).splitlines(), _text(step.after).splitlines(), lineterm="")
    out += [line for line in diff if not line.startswith(("--- ", "+++ "))]
    out.append(f"<<< {step.tag}")
    return out
