"""The pipeline: the ordered passes and the trace they leave.

Each entry is (stage, pass name, function). A function takes the previous stage's IR and
returns the next one, or (next IR, notes) when it has decisions to explain. The CLI's -v
output, the notebook stepper and golden tests all read the trace this produces."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .passes.decompose import decompose
from .passes.fuse import fuse

# Lowering passes after capture, in order. Stages below Loop IR plug in here.
PIPELINE = (
    ("tensor", "decompose", decompose),
    ("loop", "fuse", fuse),
)


@dataclass(frozen=True)
class TraceStep:
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


def lower(torch_ir) -> tuple[dict, tuple[TraceStep, ...]]:
    """Run every pass after capture. Returns {stage: IR} and the trace."""
    stages = {"torch": torch_ir}
    trace = [TraceStep("torch", "capture", after=torch_ir)]
    current = torch_ir
    for stage, name, fn in PIPELINE:
        result = fn(current)
        notes: tuple[str, ...] = ()
        if isinstance(result, tuple):
            result, notes = result
        trace.append(TraceStep(stage, name, before=current, after=result, notes=tuple(notes)))
        stages[stage] = current = result
    return stages, tuple(trace)
