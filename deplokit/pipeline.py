"""The pipeline: the ordered passes and the trace they leave.

Each entry is (stage, pass name, function). A function takes the previous stage's IR and
the Context and returns the next IR; or (next IR, notes) when it has decisions to explain;
or (next IR, steps) when it is itself a sequence of passes that trace one step each (the
16 Tile-IR passes). The CLI's -v output, the notebook stepper and golden tests all read
the trace this produces."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from .display import Displayable

from .passes.decompose import decompose
from .passes.fuse import fuse
from .passes.lower.cuda import render_cuda
from .passes.lower.materialize import materialize
from .passes.schedule import schedule
from .passes.split_reduce import split_reduce
from .target import Target

# Lowering passes after capture, in order.
PIPELINE = (
    ("tensor", "decompose", decompose),
    ("loop", "fuse", fuse),
    ("loop", "split_reduce", split_reduce),
    ("tile", "schedule", schedule),
    ("kernel", "materialize", materialize),
    ("cuda", "render", render_cuda),
)
STAGES = ("torch",) + tuple(dict.fromkeys(stage for stage, _, _ in PIPELINE))


@dataclass(frozen=True)
class Context:
    target: Target
    config: dict = field(default_factory=dict)   # "tNNN_pass.knob" -> value, overriding defaults


@dataclass(frozen=True)
class TraceStep(Displayable):
    stage: str                                  # the IR the step produces: torch, tensor, loop, ...
    name: str
    params: tuple[tuple[str, Any], ...] = ()
    before: Any = None
    after: Any = None
    skipped_reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return not self.skipped_reason and self.before != self.after

    @property
    def tag(self) -> str:
        """`t:007_stage_inputs` for a Tile-IR pass, `t:<stage>:<name>` for any other step."""
        return f"t:{self.name}" if self.stage == "tile" else f"t:{self.stage}:{self.name}"

    def __str__(self) -> str:
        return "\n".join(format_step(self))


def _text(ir) -> str:
    return "" if ir is None else str(ir)


def format_step(step: TraceStep) -> list[str]:
    """One trace step as text: a unified diff of its before and after between `>>> TAG` and
    `<<< TAG` (knobs as `@@ kernel: k=v @@` lines, notes as `# ...`), or the one line
    `--- TAG skipped: <reason>` for a step that changed nothing. The CLI's -vv and the
    notebook read this."""
    if step.skipped_reason or _text(step.before) == _text(step.after):
        return [f"--- {step.tag} skipped: {step.skipped_reason or 'no change'}"]
    out = [f">>> {step.tag}"]
    for kernel, knobs in step.params if step.stage == "tile" else ():
        knob_text = ", ".join(f"{k}={v}" for k, v in knobs)
        out.append(f"@@ {kernel}{': ' + knob_text if knob_text else ''} @@")
    out += [f"# {note}" for note in step.notes]
    diff = difflib.unified_diff(_text(step.before).splitlines(), _text(step.after).splitlines(), lineterm="")
    out += [line for line in diff if not line.startswith(("--- ", "+++ "))]
    out.append(f"<<< {step.tag}")
    return out


def lower(torch_ir, ctx: Context, dedup: bool = False) -> tuple[dict, tuple[TraceStep, ...]]:
    """Run every pass after capture. Returns {stage: IR} and the trace. With `dedup`, the
    stages after Loop IR hold each structurally unique kernel once and stages["launches"]
    says which kernel each launch of the Loop IR runs (passes/dedup.py)."""
    stages = {"torch": torch_ir}
    trace = [TraceStep("torch", "capture", after=torch_ir)]
    current = torch_ir
    for stage, name, fn in PIPELINE:
        result = fn(current, ctx)
        if isinstance(result, tuple):
            result, extra = result
            if extra and isinstance(extra[0], TraceStep):
                trace.extend(extra)
            else:
                trace.append(TraceStep(stage, name, before=current, after=result, notes=tuple(extra)))
        else:
            trace.append(TraceStep(stage, name, before=current, after=result))
        stages[stage] = current = result
        if fn is split_reduce and dedup:     # after the last Loop-IR pass
            from .passes.dedup import dedup as unique_kernels
            current, stages["launches"], notes = unique_kernels(result)
            trace.append(TraceStep("loop", "dedup", before=result, after=current, notes=notes))
    return stages, tuple(trace)
