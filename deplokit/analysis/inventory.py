"""The kernel inventory of a compilation: each unique kernel, how many times it is launched,
its tensors' shapes, and the bytes and FLOPs of one launch.

One vocabulary: a *launch* is one kernel the GPU runs; a *unique kernel* is one `__global__`
function of the CUDA (identical decoder layers launch the same one). A split-K matmul's
reducer is a kernel too, launched right after each launch of the matmul it serves: it is
listed (its `of` names that matmul) and counted in both totals.

Bytes and FLOPs are those the benchmarks measure against (analysis/traffic.py): the
compulsory traffic, every tensor the kernel reads or writes once, or only the elements read
when that is fewer (a gather); and the arithmetic the loop nest executes (a multiply-add
counts 2; selections and comparisons do not count). A Loop-IR kernel's come from the Loop
IR; a reducer's, which the schedule made, from its Tile IR (analysis/work.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..display import Displayable
from ..ir.loop_ir import Load, LoopProgram
from ..ir.tile_ir import walk
from ..ir.types import format_shape
from .computes import computes, merged_labels
from .traffic import floor_flops, loop_kernel_cost
from .work import count_work


@dataclass(frozen=True)
class InventoryEntry:
    kernel: str                                 # the unique kernel (its first launch's name)
    launches: int
    inputs: tuple[tuple[int, ...], ...]         # shapes read, in the kernel's canonical order
    outputs: tuple[tuple[int, ...], ...]        # shapes written
    bytes: int                                  # per launch
    flops: int                                  # per launch
    of: str = ""                                # a split-K reducer: the kernel it is launched after
    computes: str = ""                          # what it computes, in the model's words (analysis/computes.py)

    @property
    def shapes(self) -> str:
        return (", ".join(format_shape(s) for s in self.inputs) + " -> "
                + ", ".join(format_shape(s) for s in self.outputs))


@dataclass(frozen=True)
class Inventory(Displayable):
    """The entries, in order of first launch (a reducer right after its matmul); iterates,
    indexes and measures like the tuple it holds. str(): a fixed-width table."""
    entries: tuple[InventoryEntry, ...]

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i):
        return self.entries[i]

    @property
    def launches(self) -> int:
        return sum(e.launches for e in self.entries)

    @property
    def reducers(self) -> int:
        return sum(1 for e in self.entries if e.of)

    def __str__(self) -> str:
        return format_inventory(self.entries)


def inventory(program: LoopProgram, launches=(), tile_program=None) -> Inventory:
    """One entry per unique kernel, in order of first launch. `launches` (passes/dedup.py)
    groups identical kernels; without them every kernel is its own entry. `tile_program`
    (the scheduled program) adds each split-K reducer after the kernel it serves."""
    types = program.types()
    counts: dict[str, int] = {}
    labels: dict[str, list[str]] = {}
    whole = {k.name: k for k in (program.whole or program).kernels} if launches else {}
    for launch in launches:
        counts[launch.runs] = counts.get(launch.runs, 0) + 1
        if launch.kernel in whole:
            labels.setdefault(launch.runs, []).append(computes(whole[launch.kernel]))
    reducers = {}
    if tile_program is not None:
        tiles = {k.name: k for k in tile_program.kernels}
        tile_types = tile_program.types()
        reducers = {k.name: tiles[k.split_k.reducer] for k in tile_program.kernels
                    if k.split_k is not None and k.split_k.reducer in tiles}
    out = []
    for k in program.kernels:
        if launches and k.name not in counts:
            continue
        inputs = tuple(types[t].shape for t in k.inputs() if t in types)
        outputs = tuple(types[t].shape for t in k.outputs if t in types)
        cost = loop_kernel_cost(k, types)
        n = counts.get(k.name, 1)
        label = merged_labels(labels[k.name]) if k.name in labels else computes(k)
        # a prologue staged inside a K loop counts once per operand element, as the floor does
        out.append(InventoryEntry(k.name, n, inputs, outputs, cost.bytes, floor_flops(k), computes=label))
        if k.name in reducers:
            r = reducers[k.name]
            work = count_work(r, tile_types)
            read = dict.fromkeys(st.tensor for st, _ in walk(r.body) if isinstance(st, Load))
            out.append(InventoryEntry(r.name, n, tuple(tile_types[t].shape for t in read if t in tile_types),
                                      tuple(tile_types[t].shape for t in r.outputs if t in tile_types),
                                      work.compulsory_bytes, int(work.flops), of=k.name,
                                      computes="split-K: adds the partial sums"))
    return Inventory(tuple(out))


def format_inventory(entries) -> str:
    """A fixed-width table with a totals line; deterministic text."""
    rows = [("kernel", "launches", "shapes (inputs -> outputs)", "bytes/launch", "FLOPs/launch", "computes")]
    rows += [(e.kernel, str(e.launches), e.shapes, si(e.bytes, "B"), si(e.flops, ""), e.computes) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = ["  ".join(c.rjust(w) if i in (1, 3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.append(total_line(entries))
    return "\n".join(lines) + "\n"


def total_line(entries) -> str:
    launches = sum(e.launches for e in entries)
    moved = sum(e.launches * e.bytes for e in entries)
    flops = sum(e.launches * e.flops for e in entries)
    reducers = sum(1 for e in entries if e.of)
    among = f" ({reducers} split-K reducer{'s' if reducers != 1 else ''} among them)" if reducers else ""
    return (f"total: {launches} launches of {len(entries)} unique kernels{among}, "
            f"{si(moved, 'B')} moved, {si(flops, 'FLOP')}")


def si(n: int, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n} {unit}".rstrip()
