"""Loop IR → the unique kernels it launches: identical layers compile once.

Layer 5's `merged_rms_norm_10` is layer 0's `merged_rms_norm` over other tensors: the same
structural signature (deplokit/ir/structural.py). Scheduling, materialising and rendering
the first kernel of each signature is enough; every kernel of the program becomes a
`Launch` of one of them, with its own tensors bound to the unique kernel's tensors, in the
canonical order the signature numbers them. The CUDA translation unit then holds each
kernel once, and a launch passes its own pointers (the kernels take their tensors as
parameters).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.loop_ir import LoopProgram
from ..ir.structural import kernel_signature, tensor_order
from .record import Noted, Pass, Skip


@dataclass(frozen=True)
class Launch:
    kernel: str                         # the kernel as fused, e.g. merged_rms_norm_10
    runs: str                           # the unique kernel it runs, e.g. merged_rms_norm
    args: tuple[tuple[str, str], ...]   # (the unique kernel's tensor, this launch's tensor)

    def __str__(self) -> str:
        if self.kernel == self.runs:
            return self.kernel
        bound = ", ".join(f"{mine}={theirs}" for mine, theirs in self.args if mine != theirs)
        return f"{self.kernel} runs {self.runs}" + (f" with {bound}" if bound else "")


def dedup(program: LoopProgram) -> tuple[LoopProgram, tuple[Launch, ...], tuple[str, ...]]:
    """(the program restricted to its unique kernels, one Launch per kernel in launch order,
    notes for the trace). The restricted program's buffers and outputs are those its
    kernels touch; the launches reach every other tensor through their bindings."""
    types = program.types()
    first: dict[str, str] = {}                  # signature -> unique kernel name
    order: dict[str, tuple[str, ...]] = {}      # unique kernel name -> its tensors, canonical order
    launches, notes, kept = [], [], []
    for k in program.kernels:
        sig = kernel_signature(k, types)
        mine = tensor_order(k)
        if sig not in first:
            first[sig] = k.name
            order[k.name] = mine
            kept.append(k)
            launches.append(Launch(k.name, k.name, tuple((t, t) for t in mine)))
            continue
        unique = first[sig]
        launches.append(Launch(k.name, unique, tuple(zip(order[unique], mine))))
    counts: dict[str, int] = {}
    for launch in launches:
        counts[launch.runs] = counts.get(launch.runs, 0) + 1
    notes = [f"{name}: {n} launches" for name, n in counts.items() if n > 1]
    used = {t for k in kept for t in tensor_order(k)}
    unique = LoopProgram(tuple(b for b in program.buffers if b.name in used),
                         tuple(b for b in program.written if b.name in used), tuple(kept),
                         tuple(o for o in program.outputs if o in used), program, tuple(launches))
    dropped = len(program.kernels) - len(kept)
    notes.insert(0, f"{len(program.kernels)} kernels, {len(kept)} unique"
                    + (f": {dropped} launches reuse a kernel of the same structure" if dropped else ""))
    return unique, tuple(launches), tuple(notes)


def _apply(program, pctx):
    if not pctx.compile.dedup:
        return Skip("off: every kernel is scheduled (deplokit.compile(dedup=True) and named models turn it on)")
    unique, _, notes = dedup(program)
    return Noted(unique, notes)


PASS = Pass("dedup", "loop", "keep each structurally unique kernel once; every kernel becomes a launch", _apply)
