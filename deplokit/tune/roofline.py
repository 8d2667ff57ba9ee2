"""Each kernel of a compilation on the target's roofline, without a GPU.

A kernel's *arithmetic intensity* is its FLOPs over the bytes it must move (each tensor it
touches once: analysis/work.py's compulsory bytes). The target's two ceilings, peak memory
bandwidth and peak FP32, bound what any schedule can reach: below the ridge point
(intensity < peak FLOP/s / peak bytes/s) a kernel is memory-bound, above it compute-bound.
Next to that bound stands the cost model's predicted time for the schedule deplokit chose
(tune/cost_model.py: sectors actually fetched, bank conflicts, occupancy, barriers), and,
where a GPU ran the program, the measured time from a BenchReport. Nothing is timed here."""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis.traffic import kernel_func_bytes
from ..analysis.work import count_work
from ..display import Displayable
from .cost_model import estimate, roofline_us


@dataclass(frozen=True)
class KernelPoint:
    name: str
    flops: float
    bytes: int                  # compulsory bytes: every tensor the kernel touches, once
    fetched_bytes: float        # global bytes in whole 32-byte sectors, as scheduled
    roof_us: float              # the ceiling: no schedule is faster
    predicted_us: float         # the cost model's time for this schedule
    bound: str                  # what the cost model says limits it: dram, l2 or sm
    measured_us: float | None = None

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def gflops(self, time_us: float | None) -> float | None:
        return self.flops / (time_us * 1e3) if time_us else None


@dataclass(frozen=True)
class Roofline(Displayable):
    target: str
    gpu: str
    peak_bandwidth_gbs: float
    peak_gflops: float
    points: tuple[KernelPoint, ...]
    measured_on: str = ""       # the GPU the measured points come from, '' without
    label: str = ""             # what this is the roofline of ("default", "tuned"), for titles

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) where the two ceilings meet."""
        return self.peak_gflops / self.peak_bandwidth_gbs

    def __str__(self) -> str:
        lines = [f"roofline{' of ' + self.label if self.label else ''} on {self.target} ({self.gpu}): "
                 f"{self.peak_bandwidth_gbs:g} GB/s, "
                 f"{self.peak_gflops / 1e3:g} TFLOP/s FP32, ridge at {self.ridge:.1f} FLOP/byte",
                 f"{'kernel':28s} {'FLOP/byte':>9s} {'roof µs':>9s} {'model µs':>9s} {'measured':>9s}  bound"]
        for p in self.points:
            measured = f"{p.measured_us:9.2f}" if p.measured_us else f"{'—':>9s}"
            side = "memory" if p.intensity < self.ridge else "compute"
            lines.append(f"{p.name:28s} {p.intensity:9.2f} {p.roof_us:9.2f} {p.predicted_us:9.2f} {measured}  "
                         f"{side} (model: {p.bound})")
        if not self.measured_on:
            lines.append("no measured points: they need a GPU (deplokit bench)")
        return "\n".join(lines)


def roofline_of(compilation, report=None, label: str = "") -> Roofline:
    """The compilation's kernels on its target's roofline; `report` (a BenchReport from a GPU
    run of the same program) adds the measured time of each kernel it profiled; `label`
    names it in titles."""
    target = compilation.target
    tile, kernels = compilation.tile_ir, compilation.kernel_ir
    types = tile.types()
    tiles = {k.name: k for k in tile.kernels}
    predicted = {k.name: k for k in estimate(tile, kernels, target).kernels}
    measured = {k.name: k.time_us for k in getattr(report, "kernels", ())} if report is not None else {}
    points = []
    for func in kernels.kernels:
        est = predicted[func.name]
        work = count_work(tiles[func.name], types) if func.name in tiles else est.work
        if work is None:            # a kernel the lowering added (a split-K zero fill): bytes only
            nbytes = sum(kernel_func_bytes(func))
            points.append(KernelPoint(func.name, 0.0, nbytes, float(nbytes), est.dram_us, est.time_us, est.bound,
                                      measured.get(func.name)))
            continue
        points.append(KernelPoint(func.name, work.flops, work.compulsory_bytes, work.sector_bytes,
                                  roofline_us(work, target), est.time_us, est.bound, measured.get(func.name)))
    return Roofline(target.name, target.reference_gpu, target.peak_bandwidth_gbs, target.peak_fp32_tflops * 1e3,
                    tuple(points), getattr(report, "gpu", "") if measured else "", label)
