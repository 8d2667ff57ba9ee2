"""What a benchmark measured: per program and per kernel. Filled only from real GPU timings
(runtime/bench.py); plots and tables read these and never invent a number."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelProfile:
    name: str
    time_us: float              # median over repeats, CUDA events
    launches: int
    bytes: int                  # global memory the kernel must move (compulsory traffic)
    flops: int
    registers: int | None       # ptxas
    smem_bytes: int | None
    occupancy: float | None     # resident warps / max warps per SM, 0..1

    @property
    def gbs(self) -> float:
        return self.bytes / (self.time_us * 1e3) if self.time_us else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / (self.time_us * 1e3) if self.time_us else 0.0


@dataclass(frozen=True)
class BenchReport:
    name: str                   # the program (expression, suite entry)
    gpu: str                    # device name as the driver reports it
    target: str                 # sm_90 ...
    deplokit_us: float
    eager_us: float | None
    compile_us: float | None    # torch.compile; None when it failed or was not asked for
    bytes: int
    flops: int
    peak_bandwidth_gbs: float
    peak_fp32_tflops: float
    kernels: tuple[KernelProfile, ...] = ()
    notes: tuple[str, ...] = ()  # why a comparison is missing (torch.compile failed ...)

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.eager_us / self.deplokit_us if self.eager_us else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return self.compile_us / self.deplokit_us if self.compile_us else None

    @property
    def gbs(self) -> float:
        return self.bytes / (self.deplokit_us * 1e3)

    @property
    def bound(self) -> str:
        """memory | compute: which roof the program's arithmetic intensity puts it under."""
        ridge = self.peak_fp32_tflops * 1e3 / self.peak_bandwidth_gbs     # FLOP per byte
        return "compute" if self.bytes and self.flops / self.bytes > ridge else "memory"

    @property
    def pct_of_peak(self) -> float:
        """Achieved share of the roof that bounds it: HBM bandwidth or FP32 FLOP/s, in %."""
        if self.bound == "compute":
            return 100.0 * self.flops / (self.deplokit_us * 1e-6) / (self.peak_fp32_tflops * 1e12)
        return 100.0 * self.gbs / self.peak_bandwidth_gbs
