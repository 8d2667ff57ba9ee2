"""The kernel inventory of a compilation: each unique kernel, how many times it runs, its
tensors' shapes, and the bytes and FLOPs of one launch.

Bytes and FLOPs are those the benchmarks measure against (analysis/traffic.py): the
compulsory traffic, every tensor the kernel reads or writes once, or only the elements read
when that is fewer (a gather); and the arithmetic the loop nest executes (a multiply-add
counts 2; selections and comparisons do not count). Both come from the Loop IR alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.loop_ir import LoopProgram
from ..ir.types import format_shape
from .traffic import loop_kernel_cost


@dataclass(frozen=True)
class InventoryEntry:
    kernel: str                                 # the unique kernel (its first launch's name)
    launches: int
    inputs: tuple[tuple[int, ...], ...]         # shapes read, in the kernel's canonical order
    outputs: tuple[tuple[int, ...], ...]        # shapes written
    bytes: int                                  # per launch
    flops: int                                  # per launch

    @property
    def shapes(self) -> str:
        return (", ".join(format_shape(s) for s in self.inputs) + " -> "
                + ", ".join(format_shape(s) for s in self.outputs))


def inventory(program: LoopProgram, launches=()) -> tuple[InventoryEntry, ...]:
    """One entry per unique kernel, in order of first launch. `launches` (passes/dedup.py)
    groups identical kernels; without them every kernel is its own entry."""
    types = program.types()
    counts: dict[str, int] = {}
    for launch in launches:
        counts[launch.runs] = counts.get(launch.runs, 0) + 1
    out = []
    for k in program.kernels:
        if launches and k.name not in counts:
            continue
        inputs = tuple(types[t].shape for t in k.inputs() if t in types)
        outputs = tuple(types[t].shape for t in k.outputs if t in types)
        cost = loop_kernel_cost(k, types)
        out.append(InventoryEntry(k.name, counts.get(k.name, 1), inputs, outputs,
                                  cost.bytes, cost.flops))
    return tuple(out)


def format_inventory(entries) -> str:
    """A fixed-width table with a totals line; deterministic text."""
    rows = [("kernel", "runs", "shapes (inputs -> outputs)", "bytes/launch", "FLOPs/launch")]
    rows += [(e.kernel, str(e.launches), e.shapes, _si(e.bytes, "B"), _si(e.flops, "")) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.rjust(w) if i in (1, 3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    launches = sum(e.launches for e in entries)
    moved = sum(e.launches * e.bytes for e in entries)
    flops = sum(e.launches * e.flops for e in entries)
    lines.append(f"total: {launches} launches of {len(entries)} unique kernels, "
                 f"{_si(moved, 'B')} moved, {_si(flops, 'FLOP')}")
    return "\n".join(lines) + "\n"


def _si(n: int, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n} {unit}".rstrip()
