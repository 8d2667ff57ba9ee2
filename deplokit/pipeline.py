"""The pipeline: every pass after capture, in one flat tuple, and the trace it leaves.

Each entry is a pass record (deplokit/passes/record.py): a whole-program `Pass` or a
kernel-by-kernel `KernelPass`; `run(ir, ctx)` gives its TraceStep, whose `after` is the
next pass's input. The CLI's -v / -vv, the notebook stepper and the golden tests read the
trace; the Context and the TraceStep live in deplokit/trace.py."""
from __future__ import annotations

from .errors import ConfigError
from .passes.decompose import decompose
from .passes.dedup import dedup
from .passes.fuse import fuse_kernels
from .passes.fuse.attention import fuse_attention
from .passes.fuse.lift import lift
from .passes.fuse.rows import fuse_rows
from .passes.lower import LOWERING
from .passes.lower.cuda import render_cuda
from .passes.record import KernelPass, Noted, Pass, Skip, flag_knob, run_passes, validate_config, validate_kernel_names
from .passes.schedule import SCHEDULE
from .passes.split_reduce import SPLIT_REDUCE
from .passes.verify import verify
from .trace import Context, TraceStep, format_step  # noqa: F401  (the pipeline's vocabulary)

__all__ = ["PIPELINE", "STAGES", "Context", "TraceStep", "format_step", "lower", "run_passes", "with_passes"]


def _decompose(program, pctx):
    return decompose(program, pctx.compile)


def _lift(program, pctx):
    return lift(program)


def _fuse(program, pctx):
    if program.graph is None:
        return Skip("not a lifted program: no Tensor-IR graph to fuse by")
    return Noted(*fuse_kernels(program.graph))


def _fuse_attention(program, pctx):
    loop, notes = fuse_attention(program, by_cost=pctx.knobs["by_cost"], target=pctx.target)
    if loop == program:
        return Skip("; ".join(notes) or "no chain of contraction, softmax, contraction kernels")
    return Noted(loop, notes)


def _fuse_rows(program, pctx):
    loop, notes = fuse_rows(program, by_cost=pctx.knobs["by_cost"])
    if loop == program:
        return Skip("; ".join(notes) or "no chain of contraction, softmax, contraction kernels")
    return Noted(loop, notes)


def _dedup(program, pctx):
    if not pctx.compile.dedup:
        return Skip("off: every kernel is scheduled (deplokit.compile(dedup=True) and named models turn it on)")
    unique, _, notes = dedup(program)
    return Noted(unique, notes)


def _render(program, pctx):
    return render_cuda(program, pctx.compile)


PIPELINE = (
    Pass("decompose", "tensor", "rewrite each Torch op into Tensor-IR nodes", _decompose),
    Pass("lift", "loop", "lift every Tensor-IR node to a loop nest of its own (nothing fused yet)", _lift),
    Pass("fuse", "loop", "fuse producers into their consumers' loop nests; store only what the guard keeps", _fuse),
    Pass("fuse_attention", "loop", "attention's kernels become one flash-attention kernel (online softmax)",
         _fuse_attention,
         (flag_knob("enable", "fuse attention into one kernel over key tiles, the softmax online", "attention fusion"),
          flag_knob("by_cost", "fuse only where the guard counts fewer bytes moved and little more work"))),
    Pass("fuse_rows", "loop", "merge attention's kernels so that no scores row leaves the chip", _fuse_rows,
         (flag_knob("enable", "keep attention's scores and probabilities a row at a time on chip", "row fusion"),
          flag_knob("by_cost", "fuse only where the fusion guard counts fewer bytes moved and no more work"))),
    SPLIT_REDUCE,
    Pass("dedup", "loop", "keep each structurally unique kernel once; every kernel becomes a launch", _dedup),
    *SCHEDULE,
    *LOWERING,          # 001_materialize, 002_stage_copies, 003_zero_init (passes/lower)
    Pass("render", "cuda", "print the Kernel IR as one CUDA translation unit", _render),
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
