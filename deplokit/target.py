"""The GPU a compilation is for, as data read by passes, cost model and benchmarks alike."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import DeplokitError


@dataclass(frozen=True)
class Target:
    name: str                  # sm_80, sm_90, sm_120
    sm: int
    smem_per_block: int        # bytes of shared memory one block may use (opt-in maximum)
    registers_per_thread: int
    cp_async: bool             # sm_80+: cp.async global -> shared copies
    tma: bool                  # sm_90+: tensor memory accelerator bulk copies
    peak_bandwidth_gbs: float  # HBM/GDDR, of a reference part
    peak_fp32_tflops: float
    reference_gpu: str


TARGETS = {
    "sm_80": Target("sm_80", 80, 163 * 1024, 255, True, False, 2039.0, 19.5, "A100 SXM 80GB"),
    "sm_90": Target("sm_90", 90, 227 * 1024, 255, True, True, 3350.0, 67.0, "H100 SXM"),
    "sm_120": Target("sm_120", 120, 99 * 1024, 255, True, False, 1792.0, 104.8, "RTX 5090"),
}


def get_target(name: str) -> Target:
    if isinstance(name, Target):
        return name
    if name not in TARGETS:
        raise DeplokitError(f"unknown target {name!r}; supported: {', '.join(TARGETS)}")
    return TARGETS[name]
