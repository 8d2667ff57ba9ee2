"""The pipeline: every pass after capture, in one flat tuple, and the trace it leaves.

Each entry is a pass record (deplokit/passes/record.py): a whole-program `Pass` or a
kernel-by-kernel `KernelPass`; `run(ir, ctx)` gives its TraceStep, whose `after` is the
next pass's input. The CLI's -v / -vv, the notebook stepper and the golden tests read the
trace; the Context and the TraceStep live in deplokit/trace.py."""
from __future__ import annotations

from .errors import ConfigError
from .passes.front import FRONT
from .passes.lower import LOWERING, cuda
from .passes.record import KernelPass, run_passes, validate_config, validate_kernel_names
from .passes.schedule import SCHEDULE
from .passes.verify import verify
from .trace import Context, TraceStep, format_step  # noqa: F401  (the pipeline's vocabulary)

__all__ = ["PIPELINE", "STAGES", "Context", "TraceStep", "format_step", "lower", "lower_through", "run_passes",
           "with_passes"]

PIPELINE = (
    *FRONT,             # decompose, lift, fuse, fuse_attention, fuse_rows, split_reduce, dedup (passes/front.py)
    *SCHEDULE,          # 001_tileify ... 016_mark_unroll: Loop IR -> Tile IR (passes/schedule)
    *LOWERING,          # 001_materialize ... 004_reconverge_warps: Tile IR -> Kernel IR (passes/lower)
    cuda.PASS,          # Kernel IR -> CUDA (passes/lower/cuda.py)
)
STAGES = ("torch",) + tuple(dict.fromkeys(p.stage for p in PIPELINE))


def with_passes(passes) -> tuple:
    """PIPELINE with one's own Tile-IR passes run after the scheduling passes (SCHEDULE), in order."""
    passes = tuple(passes)
    names = {p.name for p in PIPELINE}
    for p in passes:
        if not isinstance(p, KernelPass) or p.stage != "tile":
            raise ConfigError(f"an extra pass must be a KernelPass of stage 'tile', got {p!r:.80}")
        if p.name in names:
            raise ConfigError(f"pass {p.name} is already in the pipeline: give yours another name")
        names.add(p.name)
    if not passes:
        return PIPELINE
    at = PIPELINE.index(SCHEDULE[-1]) + 1
    return PIPELINE[:at] + passes + PIPELINE[at:]


def lower_through(ir, last: str, ctx: Context, first: str | None = None):
    """`ir` through the pipeline's passes from `first` (the first pass when None) up to and
    including `last`, as `lower` runs them: the IR `last` produced. What a view of part of the
    pipeline runs (the notebook's graphs: decompose, lift and the fusions)."""
    names = [p.name for p in PIPELINE]
    start = names.index(first) if first is not None else 0
    return run_passes(PIPELINE[start:names.index(last) + 1], ir, ctx)[0]


def lower(torch_ir, ctx: Context) -> tuple[dict, tuple[TraceStep, ...]]:
    """Run every pass after capture (and ctx.passes, one's own, after the scheduling passes).
    Returns {stage: the IR its last pass produced} and the trace. With ctx.dedup, the stages
    after Loop IR hold each structurally unique kernel once; the Loop program they start from
    keeps the whole program and its launches."""
    pipeline = with_passes(ctx.passes)
    validate_config(ctx.config, pipeline)
    stages = {"torch": torch_ir}
    trace = [TraceStep("torch", "capture", after=torch_ir)]
    _, steps = run_passes(pipeline, torch_ir, ctx)
    for step, nxt in zip(steps, steps[1:] + (None,)):
        if nxt is None or nxt.stage != step.stage:   # a stage boundary: its IR keeps its invariants
            verify(step.after, ctx.target)           # (passes/verify.py; check_passes verifies every step)
        stages[step.stage] = step.after
    loop = stages["loop"]
    whole = loop if loop.whole is None else loop.whole
    validate_kernel_names(ctx.config, (k.name for k in whole.kernels))
    return stages, tuple(trace) + steps
