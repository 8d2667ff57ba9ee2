"""One layer's launches in the order the GPU runs them, each with its bytes, FLOPs and the
cost model's time (and the measured time, where a GPU profiled the program).

    timeline_of(c, layer=0)      # a model: the launches of decoder layer 0
    timeline_of(c)               # a program that is not a model: every launch

A launch runs a unique kernel (passes/dedup.py); a split-K matmul's reducer follows it as a
launch of its own. The times are the model's per kernel (tune/cost_model.py), summed in
order: where each launch would start and end on an idle GPU, nothing overlapping."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..analysis.computes import computes
from ..display import Displayable
from .cost_model import estimate


@dataclass(frozen=True)
class LaunchRow:
    launch: str              # the launch's own name (layer0_..., the Loop-IR kernel it was)
    kernel: str              # the unique kernel it runs
    bytes: int
    flops: int
    model_us: float
    start_us: float          # the model's times of the launches before it, summed
    measured_us: float | None = None
    of: str = ""             # a split-K reducer: the launch it follows
    computes: str = ""       # what it computes, in the model's words (analysis/computes.py)


@dataclass(frozen=True)
class Timeline(Displayable):
    target: str
    label: str               # "layer 0" or "the program"
    rows: tuple[LaunchRow, ...]

    @property
    def model_us(self) -> float:
        return sum(r.model_us for r in self.rows)

    def __str__(self) -> str:
        w = max([34] + [len(r.launch) for r in self.rows])      # the launch column fits the longest name
        head = (f"{'#':>3}  {'launch':<{w}} {'start µs':>9} {'model µs':>9} {'MB':>8} {'MFLOP':>9} {'measured':>9}"
                "  computes (runs kernel)")
        lines = [f"timeline of {self.label} on {self.target}: {len(self.rows)} launches, "
                 f"{self.model_us:.2f} µs by the cost model (predicted, one after another)", head]
        for i, r in enumerate(self.rows):
            measured = f"{r.measured_us:9.2f}" if r.measured_us is not None else f"{'—':>9}"
            lines.append(f"{i:>3}  {r.launch:<{w}} {r.start_us:9.2f} {r.model_us:9.2f} "
                         f"{r.bytes / 1e6:8.3f} {r.flops / 1e6:9.2f} {measured}  {r.computes} ({r.kernel})")
        return "\n".join(lines)


def timeline_of(compilation, layer: int | None = 0, report=None) -> Timeline:
    """The launches of decoder layer `layer` of a model (its launches are named layerN_...),
    or of the whole program when it has no such launches or `layer` is None; `report` (a
    BenchReport with a profile) adds the measured time of each kernel."""
    entries = {e.kernel: e for e in compilation.inventory()}
    times = {k.name: k.time_us for k in estimate(compilation.tile_ir, compilation.kernel_ir,
                                                   compilation.target).kernels}
    reducer = {e.of: e.kernel for e in entries.values() if e.of}
    own = {k.name: k for k in compilation.loop_ir.kernels}
    measured = {k.name: k.time_us for k in getattr(report, "kernels", ())}
    pairs = [(launch.kernel, launch.runs) for launch in compilation.launches] or \
        [(k.name, k.name) for k in compilation.loop_ir.kernels]
    ours = re.compile(rf"(^|_)layer{layer}_")       # layer0_self_attn_q_proj (analysis/computes.py)
    mine = [p for p in pairs if layer is not None and ours.search(p[0])]
    label = f"layer {layer}" if mine else "the program"
    rows, start = [], 0.0
    for name, kernel in mine or pairs:
        for launch, runs, of in ((name, kernel, ""), (f"{name} reducer", reducer.get(kernel), name)):
            if runs is None:
                continue
            e = entries[runs]
            t = times.get(runs, 0.0)
            what = e.computes if of or launch not in own else computes(own[launch])
            rows.append(LaunchRow(launch, runs, e.bytes, e.flops, t, start, measured.get(runs), of, what))
            start += t
    return Timeline(compilation.target.name, label, tuple(rows))
