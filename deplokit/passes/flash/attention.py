"""Attention fusion: scores -> softmax -> P @ V become one flash-attention kernel, by cost.

For every chain of kernels that row fusion would merge (rows.py: a contraction, a softmax,
a contraction over the same rows), the merged row body is matched against attention
(attention_match.py) and rebuilt as one pass over the keys with an online softmax
(attention_loop.py). Its plan (attention_plan.py: the query rows and heads a block owns,
the key tile, causal tiles skipped) is recorded on the kernel, and 001 tileify schedules it
(flash/flash_tile.py). The fusion goes ahead when the guard's count says it wins: it
moves no more bytes than the three kernels it replaces and its work (the online rescale
adds a multiply per output element and key; causal skipping removes tiles) stays within
FLASH_WORK_BUDGET times theirs, and, its blocks dealt to the target's SMs, it is estimated
no slower (grid_fill.py: a flash kernel of few blocks leaves SMs idle). Otherwise the chain
is left to row fusion, and the trace says why.
"""
from __future__ import annotations

import dataclasses

from ...analysis.computes import KernelNamer
from ...ir.loop_ir import LoopProgram, flash_parts
from ...ir.types import HALF_DTYPES
from ..fuse.grid_fill import estimate, unfused_estimate
from ..fuse.guard import Traffic, fusion_pays
from ..record import Knob, Noted, Pass, Skip, flag_knob
from ..rows.row_cost import unfused_traffic
from ..rows.rows import ChainFacts, merge_chain, plan_chain, with_kernels
from .attention_loop import flash_kernel
from .attention_match import match_attention
from .attention_plan import FILL_BYTES, flash_blocks, flash_traffic, plan_flash
from .attention_split import split_kernels
from .flash_mma import mma_default, plan_mma

FLASH_WORK_BUDGET = 1.5


def fuse_attention(program: LoopProgram, by_cost: bool = True, target=None,
                   mma: str = "off", scatter: bool = True, rows: int = 2) -> tuple[LoopProgram, tuple[str, ...]]:
    """Every attention chain replaced by its flash kernel where that pays; one note per chain.
    With a target, the check also weighs grid fill (grid_fill.py). mma="half": a half flash
    kernel computes its two products on tensor cores where it can (flash_mma.py). rows: 2 lets a
    scattered plan take two query rows a thread (attention_plan._two_rows), 1 keeps one."""
    kernels = list(program.kernels)
    temps = {b.name for b in program.written if b.kind == "temp"}
    types = program.types()
    taken = set(types) | {b.name for k in kernels for b in k.locals}
    notes: list[str] = []
    facts = ChainFacts()
    added: tuple = ()     # the split kernels' partial tensors
    scalars = frozenset(b.name for b in program.buffers if b.kind == "scalar")
    namer = KernelNamer()       # a model's flash kernel named by what it computes
    i = 0
    while i + 2 < len(kernels):
        chain = kernels[i:i + 3]
        plan = plan_chain(chain, kernels, temps, types, facts)
        if isinstance(plan, str):
            if plan:
                notes.append(f"attention: {', '.join(k.name for k in chain)} stay separate kernels: {plan}")
            i += 1
            continue
        names = ", ".join(k.name for k in chain)
        parts = match_attention(merge_chain(chain, *plan), plan[0])
        if isinstance(parts, str):
            notes.append(f"attention: {names} are not flash attention: {parts}")
            i += 1
            continue
        last = chain[-1]
        flash = flash_kernel(parts, f"flash_{last.outputs[0]}", last.outputs, taken)
        unfused = unfused_traffic(chain, types)
        # by cost, the fill stops at the unfused kernels' bytes (the guard's first rule)
        schedule = plan_flash(flash, types, target, unfused.bytes if by_cost else None, scatter, rows)
        if isinstance(schedule, str):
            notes.append(f"attention: {names} are not flash attention: {schedule}")
            i += 1
            continue
        fused = flash_traffic(flash, schedule, types)
        fill = None if target is None else \
            (estimate(fused, flash_blocks(flash, schedule), target), unfused_estimate(chain, types, target))
        wins, why = flash_pays(fused, unfused, fill, split=schedule.splits > 1)
        if by_cost and not wins:
            fill = f"; its plan: {schedule.fill}" if schedule.fill else ""
            notes.append(f"attention: {names} stay separate kernels: {why}{fill}")
            i += 1
            continue
        flash = dataclasses.replace(flash, name=namer.name_at(kernels, i, flash, "attention (flash)"))
        if schedule.splits > 1:     # flash-decoding: a split kernel and a combine
            first, combine, buffers = split_kernels(parts, flash.name, last.outputs, taken, schedule.splits,
                                                    scalars)
            schedule = dataclasses.replace(schedule, split=flash_parts(first)[0][-1].var)
            kernels[i:i + 3] = [dataclasses.replace(first, flash=schedule), combine]
            added += buffers
            notes.append(f"attention: kernels {first.name} and {combine.name} fuse {names} with an online "
                         f"softmax over {schedule.splits} key ranges, then combine them; {schedule.text()}")
        else:
            if mma == "half":
                record = plan_mma(flash, flash_parts(flash), schedule, types, target)
                if isinstance(record, str) and _reads_half(flash, types):
                    notes.append(f"attention: kernel {flash.name} multiplies on FFMA (not tensor cores): {record}")
                elif not isinstance(record, str):
                    schedule = dataclasses.replace(schedule, mma=record, scatter=False, rows=1)   # the FFMA path's
            kernels[i:i + 3] = [dataclasses.replace(flash, flash=schedule)]
            notes.append(f"attention: kernel {flash.name} fuses {names} with an online softmax; {schedule.text()}")
        notes.append(f"attention: {'cost: ' + why if wins else 'fused without the cost check: ' + why}")
        i += 1
    if len(kernels) == len(program.kernels) and not added:
        return program, tuple(notes)
    fused = with_kernels(program, kernels)
    return dataclasses.replace(fused, written=fused.written + added), tuple(notes)


def _reads_half(kernel, types) -> bool:
    """Whether the kernel reads a half tensor (then why it stays on FFMA is worth a note)."""
    return any(types[name].dtype in HALF_DTYPES for name in kernel.inputs() if name in types)


def flash_pays(fused: Traffic, unfused: Traffic, fill=None, split: bool = False) -> tuple[bool, str]:
    """No more bytes than the kernels it replaces, work within FLASH_WORK_BUDGET x theirs,
    and (fill: the (fused, unfused) grid_fill estimates) no slower once its blocks are dealt
    to the SMs. Split keys (flash-decoding, with a fill estimate): the partials' bytes buy the
    blocks, so the bytes may reach FILL_BYTES x theirs and the estimate decides."""
    _, verdict = fusion_pays("flash attention", fused, unfused)
    bound = FILL_BYTES * unfused.bytes if split and fill is not None else unfused.bytes
    wins = fused.bytes <= bound and fused.flops <= FLASH_WORK_BUDGET * unfused.flops
    why = f"{verdict}; work budget {FLASH_WORK_BUDGET:g}x"
    if bound != unfused.bytes:
        why += f"; split keys: bytes up to {FILL_BYTES}x theirs, the grid fill decides"
    if fill is not None:
        mine, theirs = fill
        wins = wins and mine.us <= theirs.us
        why += (f"; grid fill: estimated {mine.text()}, the unfused kernels {theirs.text()} "
                f"({'no slower' if mine.us <= theirs.us else 'slower: too few blocks for the SMs'})")
    return wins, why


def _apply(program, pctx):
    loop, notes = fuse_attention(program, by_cost=pctx.knobs["by_cost"], target=pctx.target, mma=pctx.knobs["mma"],
                                 scatter=pctx.knobs["scatter_scores"], rows=pctx.knobs["rows_per_thread"])
    if loop == program:
        return Skip("; ".join(notes) or "no chain of contraction, softmax, contraction kernels")
    return Noted(loop, notes)


PASS = Pass("fuse_attention", "loop", "attention's kernels become one flash-attention kernel (online softmax)", _apply,
            (flag_knob("enable", "fuse attention into one kernel over key tiles, the softmax online",
                       "attention fusion"),
             flag_knob("by_cost", "fuse only where the guard counts fewer bytes moved and little more work"),
             Knob("mma", ("half", "off"), mma_default,
                  "half attention's QK^T and PV on tensor cores (mma.sync m16n8k16, FP32 softmax); off: FFMA"),
             flag_knob("scatter_scores", "a row's lanes transpose their partial scores (each lane the softmax of "
                       "1/lanes of a key tile) instead of all-reducing every score"),
             Knob("rows_per_thread", (2, 1), lambda program, target: 2,
                  "query rows a thread of a scattered plan: 2 stages the block's query rows in shared memory and "
                  "reads each K and V quad once for both, where that takes fewer registers; 1: one row")))
