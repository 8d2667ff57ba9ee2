"""Fit the cost model's constants to GPU measurements.

    samples = measure_samples(compilation, per_kernel=12)     # needs a CUDA device
    constants, error = fit_constants(samples, target)
    save_constants(cache, target, constants)                  # constants.py: the model objective then uses them

A sample is one scheduled kernel's work (traffic.KernelWork), its registers, shared memory and
spills (ptxas), and its measured time. The fit minimises the mean squared log error of the
model's predictions by coordinate search over each constant on a multiplicative grid, a few
sweeps: no dependency beyond the standard library, and the fitted values stay within a factor
of 8 of the defaults, so a handful of noisy measurements cannot send one to an absurd value.
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from ..analysis.work import count_work
from ..errors import DeplokitError
from ..passes.lower.materialize import lower_tiles
from ..runtime.device import require_gpu
from ..trace import Context
from .cost_model import CostConstants, DoesNotFit, kernel_time
from .objective import ModelObjective
from .sass_model.main_loop import main_loop
from .space import kernel_spaces

# Constants the fit may move, and how far (a factor either way) from the default.
FITTED = {"launch_us": 8.0, "l2_bandwidth_ratio": 4.0, "l2_miss": 8.0, "dram_efficiency": 1.2,
          "mem_occupancy": 4.0, "warp_issue": 2.0, "overlap": 4.0, "barrier_cycles": 8.0,
          "latency_cycles": 4.0}
_CAPS = {"dram_efficiency": 1.0, "overlap": 1.0, "mem_occupancy": 1.0, "warp_issue": 1.0, "l2_miss": 1.0}


@dataclass(frozen=True)
class Sample:
    work: object            # traffic.KernelWork
    registers: int
    smem_bytes: int
    spills: int
    measured_us: float
    loop: object = None     # main_loop.MainLoop of its Kernel IR, priced as the model objective does


def predict(sample: Sample, target, constants: CostConstants) -> float:
    try:
        return kernel_time(sample.work, target, sample.registers, sample.smem_bytes, sample.spills,
                           constants, sample.loop).time_us
    except DoesNotFit:
        return float("inf")


def log_error(samples, target, constants: CostConstants) -> float:
    """Mean squared log ratio of predicted to measured time (0 for a perfect model)."""
    errs = [math.log(predict(s, target, constants) / s.measured_us) ** 2 for s in samples]
    return sum(errs) / len(errs) if errs else 0.0


def fit_constants(samples, target, start: CostConstants = CostConstants(), sweeps: int = 4):
    """(fitted CostConstants, mean squared log error after the fit)."""
    if not samples:
        raise ValueError("no samples to calibrate on")
    best = start
    best_err = log_error(samples, target, best)
    grid = [2 ** (k / 4) for k in range(-8, 9) if k]
    for _ in range(sweeps):
        improved = False
        for name, span in FITTED.items():
            base = getattr(start, name)
            current = getattr(best, name)
            for f in grid:
                value = current * f
                if not base / span <= value <= base * span or value > _CAPS.get(name, math.inf):
                    continue
                cand = dataclasses.replace(best, **{name: value})
                err = log_error(samples, target, cand)
                if err < best_err - 1e-12:
                    best, best_err, improved = cand, err, True
        if not improved:
            break
    return best, best_err


def measure_samples(compilation, per_kernel: int = 12, seed: int = 0, listener=None) -> list[Sample]:
    """Time `per_kernel` random schedules of every kernel of `compilation` on the GPU; each
    sample pairs the measured time with the work the model prices. Needs a CUDA device."""
    require_gpu("calibrating the cost model")
    model = ModelObjective(compilation.target, ptxas=True)
    rng = random.Random(seed)
    out = []
    for space in kernel_spaces(compilation.loop_ir, compilation.target):
        leaves = [space.default_leaf()] + [space.random_leaf(rng)[1] for _ in range(per_kernel - 1)]
        for leaf in leaves:
            try:
                candidate = compilation.recompile(leaf.config_for(space.kernel_name))
                report = candidate.bench(*candidate.example_inputs, compare=(), profile=True)
            except DeplokitError:
                continue
            # The kernel's own time when the profile has it, else the whole program's (the other
            # kernels are the same in every sample: the fit absorbs them as launch overhead).
            measured = next((p.time_us for p in report.kernels if p.name == space.kernel_name), report.deplokit_us)
            tile_program = space.program_with(leaf)
            kernel_program = lower_tiles(tile_program, Context(compilation.target))
            stats = model.stats(kernel_program)
            s = stats.get(leaf.kernel.name)
            work = count_work(leaf.kernel, tile_program.types())
            func = next((f for f in kernel_program.kernels if f.name == leaf.kernel.name), None)
            sample = Sample(work, s.registers if s else 32, s.smem_bytes if s else 0, s.spills if s else 0, measured,
                            main_loop(func) if func is not None else None)
            out.append(sample)
            if listener is not None:
                listener(sample)
    return out
