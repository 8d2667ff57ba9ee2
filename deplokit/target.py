"""The GPU a compilation is for, as data read by passes, cost model and benchmarks alike.

Every hardware limit deplokit respects lives here once: the scheduling passes, the CUDA
renderer, the launch checks and the occupancy model read these fields (or, where no
target is at hand, the module constants they default to)."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import DeplokitError

# Bytes of static __shared__ memory one block may declare, on every architecture: ptxas
# refuses more; beyond it only dynamic shared memory (an opt-in per kernel) reaches the
# target's `dynamic_smem_per_block`.
STATIC_SMEM_PER_BLOCK = 48 * 1024
WARP_SIZE = 32                       # threads of a warp, on every architecture
MAX_BLOCK_THREADS = 1024             # threads of one block CUDA launches, on every architecture
VECTOR = 4                           # floats in a 16-byte access (float4, cp.async 16, a TMA granule)


@dataclass(frozen=True)
class Target:
    name: str                  # sm_80, sm_90, sm_120
    sm: int
    dynamic_smem_per_block: int   # bytes of shared memory one block may use (the dynamic opt-in maximum)
    registers_per_thread: int
    cp_async: bool             # sm_80+: cp.async global -> shared copies
    tma: bool                  # sm_90+: tensor memory accelerator bulk copies
    peak_bandwidth_gbs: float  # HBM/GDDR, of a reference part
    peak_fp32_tflops: float
    reference_gpu: str
    # SM limits of the reference part, for occupancy (analysis/occupancy.py) and L2 flushing.
    sm_count: int = 0
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    smem_per_sm: int = 0             # bytes a whole SM can give to resident blocks
    l2_bytes: int = 0
    fp32_lanes_per_sm: int = 128     # FP32 FMA units per SM (the cost model's clock)
    static_smem_per_block: int = STATIC_SMEM_PER_BLOCK   # bytes of static __shared__ per block
    warp_size: int = WARP_SIZE


TARGETS = {
    "sm_80": Target("sm_80", 80, 163 * 1024, 255, True, False, 2039.0, 19.5, "A100 SXM 80GB",
                    sm_count=108, smem_per_sm=164 * 1024, l2_bytes=40 << 20, fp32_lanes_per_sm=64),
    "sm_90": Target("sm_90", 90, 227 * 1024, 255, True, True, 3350.0, 67.0, "H100 SXM",
                    sm_count=132, smem_per_sm=228 * 1024, l2_bytes=50 << 20),
    "sm_120": Target("sm_120", 120, 99 * 1024, 255, True, False, 1792.0, 104.8, "RTX 5090",
                     sm_count=170, max_threads_per_sm=1536, max_blocks_per_sm=24, smem_per_sm=100 * 1024,
                     l2_bytes=96 << 20),
}


def get_target(name: str) -> Target:
    if isinstance(name, Target):
        return name
    if name not in TARGETS:
        raise DeplokitError(f"unknown target {name!r}; supported: {', '.join(TARGETS)}")
    return TARGETS[name]
