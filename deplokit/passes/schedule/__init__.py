"""Loop IR → Tile IR: the 16 scheduling passes, in order, each traced as one step.

The order lives here, in one flat list, as in the article:

    001 tileify                 lift outer free loops to thread axes
    002 chunk_matmul_k          chunk the K reduce into K-outer x K-inner (intra-CTA)
    003 split_matmul_k          promote the K-outer chunk loop into a grid dimension
    004 cooperative_reduce      let a block's threads share one reduce; merge with Combine
    005 blockify_launch         pick block extents; split free axes into BLOCK and THREAD
    006 chunk_reduce            chunk non-matmul reduces so their slabs fit in shared memory
    007 stage_inputs            hoist hot input slabs into Stage nodes
    008 register_tile           let each thread own a register block of a matmul
    009 permute_register_tile   reorder the register strip against bank conflicts
    010 double_buffer           promote K-outer Stages to BufferedStage (ping-pong)
    011 tma_copy                narrow BufferedStages to TMA copies (sm_90+)
    012 split_inner_for_swizzle split the inner axis of a TMA stage for swizzle
    013 async_copy              narrow the other stages to cp.async (sm_80+)
    014 pad_smem                pad shared-memory rows to break bank conflicts
    015 pipeline_k_outer        rotate the K-outer loop into prologue / steady state
    016 mark_unroll             annotate small inner loops for #pragma unroll
"""
from __future__ import annotations

import importlib
import inspect

from ...errors import DeplokitError
from ...ir.loop_ir import LoopProgram
from ...ir.tile_ir import TileKernel, TileProgram
from .knobs import Knob, Noted, Skip

PASS_MODULES = (
    "t001_tileify", "t002_chunk_matmul_k", "t003_split_matmul_k", "t004_cooperative_reduce",
    "t005_blockify_launch", "t006_chunk_reduce", "t007_stage_inputs", "t008_register_tile",
    "t009_permute_register_tile", "t010_double_buffer", "t011_tma_copy", "t012_split_inner_for_swizzle",
    "t013_async_copy", "t014_pad_smem", "t015_pipeline_k_outer", "t016_mark_unroll",
)
PASSES = tuple(importlib.import_module(f"{__name__}.{m}") for m in PASS_MODULES)


def pass_label(mod) -> str:
    """`007_stage_inputs`: how the trace, the CLI (`t:007_stage_inputs`) and the stepper name a pass."""
    return mod.__name__.rsplit(".", 1)[1][1:]


def knobs_of(mod) -> tuple[Knob, ...]:
    return getattr(mod, "KNOBS", ())


def resolve_knobs(mod, kernel: TileKernel, target, config: dict) -> dict:
    """Each knob's value for this kernel: the config's when it names one, else the default."""
    out = {}
    for knob in knobs_of(mod):
        key = f"{pass_label(mod)}.{knob.name}"
        for k in (f"{kernel.name}:{key}", key):
            if k in config:
                value = config[k]
                if value not in knob.domain:
                    raise DeplokitError(f"knob {key}={value!r} is outside its domain {knob.domain}")
                break
        else:
            value = knob.default(kernel, target)
        out[knob.name] = value
    return out


def _apply(mod, kernel: TileKernel, target, knobs: dict, types: dict):
    """mod.apply(kernel, target, knobs); a pass whose apply takes `types` (buffer name ->
    TensorType) also gets the program's tensor shapes and dtypes (alignment and bounds of
    the copies it chooses)."""
    if "types" in inspect.signature(mod.apply).parameters:
        return mod.apply(kernel, target, knobs, types=types)
    return mod.apply(kernel, target, knobs)


def apply_pass(mod, kernel: TileKernel, target, knobs: dict, types: dict) -> tuple[TileKernel | Skip, str]:
    """One pass on one kernel, as the schedule and the tuner's search space both run it:
    the rewritten kernel (its locals kept, the knob values it ran with recorded in
    `knobs`) or Skip, and a note on a choice the pass declined ('' if none)."""
    result = _apply(mod, kernel, target, knobs, types)
    if isinstance(result, Skip):
        return result, ""
    note = ""
    if isinstance(result, Noted):          # applied, declining part of what a knob asked
        result, note = result.kernel, result.note
    label = pass_label(mod)
    return TileKernel(result.name, result.outputs, result.body,
                      result.knobs + tuple((f"{label}.{n}", v) for n, v in knobs.items()), kernel.locals,
                      result.register_tiles or kernel.register_tiles, result.zero_init or kernel.zero_init), note


def initial(program: LoopProgram) -> TileProgram:
    """Loop IR as Tile IR before any pass: each kernel one thread of one block."""
    return TileProgram(program.buffers, program.written,
                       tuple(TileKernel(k.name, k.outputs, k.body, locals=k.locals) for k in program.kernels),
                       program.outputs)


def schedule(program: LoopProgram, ctx):
    from ...pipeline import TraceStep

    current = initial(program)
    steps = []
    for mod in PASSES:
        label = pass_label(mod)
        kernels, params, reasons, notes = [], [], [], []
        for k in current.kernels:
            knobs = resolve_knobs(mod, k, ctx.target, ctx.config)
            result, note = apply_pass(mod, k, ctx.target, knobs, current.types())
            if isinstance(result, Skip):
                reasons.append(f"{k.name}: {result.reason}")
                kernels.append(k)
                continue
            if note:
                notes.append(f"{k.name}: {note}")
            params.append((k.name, tuple(knobs.items())))
            kernels.append(result)
        after = TileProgram(current.buffers, current.written, tuple(kernels), current.outputs)
        changed = after != current
        skipped = "" if changed else "; ".join(reasons) or "no kernel to schedule"
        steps.append(TraceStep("tile", label, tuple(params), current, after, skipped, tuple(reasons + notes)))
        current = after
    return current, tuple(steps)
