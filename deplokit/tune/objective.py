"""What a trial costs: `model` (predicted µs, any machine) or `gpu` (measured µs, CUDA device).

An objective maps (kernel space, leaf) to microseconds, or raises TrialFailed with the reason
(a block that does not fit, nvcc refusing the source): the tuner records a failed trial and
the search moves on.

`model` materialises the one scheduled kernel with every kernel it brings (a split-K leaf's
reducer, a repacking leaf's repack kernels: KernelSpace.program_with), so a trial costs what
the compiled program would launch for it; it renders their CUDA and, when nvcc is installed,
compiles them once for ptxas's registers, shared memory and spills (~0.3 s a kernel; the
stats are kept in the tune cache by the hash of the source, so a kernel is never compiled
twice), then prices them all with tune/cost_model.py: the trial is their sum. `gpu`
recompiles the whole program with the kernel's config and times it with `Compilation.bench`
(the CuPy backend).
"""
from __future__ import annotations

import hashlib

from ..errors import DeplokitError
from ..passes.lower.cuda import render_cuda
from ..passes.lower.materialize import lower_tiles
from ..runtime.device import require_gpu
from ..runtime.nvcc import KernelStats, compile_cuda, nvcc_available
from ..trace import Context
from .constants import load_constants
from .cost_model import CostConstants, DoesNotFit, estimate

OBJECTIVES = ("model", "gpu")


class TrialFailed(Exception):
    """A config that produced no valid kernel; the message says why."""


class ModelObjective:
    name = "model"

    def __init__(self, target, cache=None, ptxas: bool | None = None, constants: CostConstants = CostConstants()):
        self.target = target
        self.cache = cache
        self.ptxas = nvcc_available() if ptxas is None else ptxas
        self.constants = constants

    def __call__(self, space, leaf) -> float:
        tile_program = space.program_with(leaf)
        try:
            kernel_program = lower_tiles(tile_program, Context(self.target))
            stats = self.stats(kernel_program) if self.ptxas else None
            return estimate(tile_program, kernel_program, self.target, stats, self.constants).time_us
        except DoesNotFit as e:
            raise TrialFailed(str(e)) from None
        except DeplokitError as e:
            raise TrialFailed(" ".join(str(e).split())) from None

    def stats(self, kernel_program) -> dict:
        """ptxas's KernelStats of every kernel, from the cache or one nvcc run."""
        source = render_cuda(kernel_program, Context(self.target))
        digest = hashlib.sha256(str(source).encode()).hexdigest()
        cached = self.cache.ptxas(digest, self.target.name) if self.cache is not None else None
        if cached is None:
            result = compile_cuda(str(source), source.build_arch(self.target.name), kernel_names=source.kernels)
            cached = {name: [s.registers, s.smem_bytes, s.spill_stores, s.spill_loads, s.stack_bytes]
                      for name, s in result.stats.items()}
            if self.cache is not None:
                self.cache.record_ptxas(digest, self.target.name, cached)
        return {name: KernelStats(*values) for name, values in cached.items()}


class GpuObjective:
    """Measured time of the program compiled with one kernel's config (the others as they are)."""
    name = "gpu"

    def __init__(self, compilation, warmup: int = 3, repeats: int = 20):
        require_gpu("the gpu objective")
        self.compilation = compilation
        self.warmup, self.repeats = warmup, repeats

    def __call__(self, space, leaf) -> float:
        try:
            candidate = self.compilation.recompile(leaf.config_for(space.kernel_name))
            report = candidate.bench(*candidate.example_inputs, warmup=self.warmup, repeats=self.repeats, compare=())
        except DeplokitError as e:
            raise TrialFailed(" ".join(str(e).split())) from None
        return float(report.deplokit_us)

    def program_cost(self, config: dict) -> float:
        """Measured time of the whole program under program-level knobs `config`."""
        try:
            candidate = self.compilation.recompile({**self.compilation._ctx.config, **config})
            report = candidate.bench(*candidate.example_inputs, warmup=self.warmup, repeats=self.repeats, compare=())
        except DeplokitError as e:
            raise TrialFailed(" ".join(str(e).split())) from None
        return float(report.deplokit_us)

    def use_program(self, config: dict) -> None:
        """Time the kernels' trials inside the program that program-level knobs `config` make."""
        self.compilation = self.compilation.recompile({**self.compilation._ctx.config, **config})


def make_objective(name: str, compilation, cache=None, ptxas: bool | None = None):
    if name == "model":
        constants = load_constants(cache, compilation.target) or CostConstants()
        return ModelObjective(compilation.target, cache, ptxas, constants)
    if name == "gpu":
        return GpuObjective(compilation)
    raise DeplokitError(f"unknown objective {name!r}; supported: {', '.join(OBJECTIVES)}")
