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
    # What the part sustains, for the cost model and the first-principles floor (peaks above
    # are the datasheet's; these are what a kernel can reach). Each with its source.
    sustained_clock_ghz: float = 0.0        # SM clock under a long FP32 load (0: peak_fp32's clock)
    achievable_bandwidth_gbs: float = 0.0   # a streaming copy's DRAM rate (0: 85% of the peak)
    sgemm_tflops: float = 0.0               # a cuBLAS-class FP32 SGEMM at full waves (0: the peak)
    sources: str = ""
    # Dense tensor-core peaks with FP32 accumulate, TFLOP/s by input type (mma.sync's
    # bf16 / f16 / tf32): the cost model's rate for a kernel whose main loop is mma
    tensor_tflops: tuple[tuple[str, float], ...] = ()
    tensor_sources: str = ""

    def tensor_rate(self, dtype: str) -> float:
        """Dense tensor-core TFLOP/s for `dtype` inputs (bf16, f16, tf32); 0 where unknown."""
        return dict(self.tensor_tflops).get(dtype, 0.0)

    @property
    def clock_hz(self) -> float:
        """The SM clock the cost model prices cycles at: the sustained one where known."""
        if self.sustained_clock_ghz:
            return self.sustained_clock_ghz * 1e9
        return self.peak_fp32_tflops * 1e12 / (max(self.sm_count, 1) * self.fp32_lanes_per_sm * 2)

    @property
    def bandwidth_gbs(self) -> float:
        """DRAM bandwidth a well-fed stream reaches (achievable, not the datasheet peak)."""
        return self.achievable_bandwidth_gbs or 0.85 * self.peak_bandwidth_gbs

    @property
    def fp32_tflops(self) -> float:
        """FP32 rate of the best library SGEMM: no FP32 kernel is expected to beat it."""
        return self.sgemm_tflops or self.peak_fp32_tflops

    @property
    def bf16(self) -> bool:
        """sm_80+: __nv_bfloat16 conversions and storage (cuda_bf16.h)."""
        return self.sm >= 80


TARGETS = {
    "sm_80": Target("sm_80", 80, 163 * 1024, 255, True, False, 2039.0, 19.5, "A100 SXM 80GB",
                    sm_count=108, smem_per_sm=164 * 1024, l2_bytes=40 << 20, fp32_lanes_per_sm=64,
                    sustained_clock_ghz=1.305, achievable_bandwidth_gbs=1730.0, sgemm_tflops=18.0,
                    sources="clock: NVIDIA's HPL Rpeak convention, the clock an A100 sustains at its power "
                            "limit (1305 of 1410 MHz boost; glennklockwood.com/garden/peak-FLOPS); bandwidth: "
                            "~85% of 2039 GB/s, a coalesced copy's rate; SGEMM: ~92% of the 1305 MHz FP32 peak "
                            "(an estimate: calibrate on a device)",
                    tensor_tflops=(("bf16", 312.0), ("f16", 312.0), ("tf32", 156.0)),
                    tensor_sources="NVIDIA A100 datasheet: 312 TFLOP/s dense BF16/FP16 tensor (FP32 accumulate), "
                                   "156 TF32"),
    "sm_90": Target("sm_90", 90, 227 * 1024, 255, True, True, 3350.0, 67.0, "H100 SXM",
                    sm_count=132, smem_per_sm=228 * 1024, l2_bytes=50 << 20,
                    sustained_clock_ghz=1.755, achievable_bandwidth_gbs=2850.0, sgemm_tflops=51.6,
                    sources="clock: the H100 SXM's default application clock (1755 of 1980 MHz boost; "
                            "67 TFLOP/s is the boost clock's); bandwidth: a coalesced load stream measures "
                            "~2.8 TB/s of 3.35 (84%, mikamirai.com/blog/gpu-memory-bandwidth); SGEMM: "
                            "cuBLAS FP32 at ~51.6 TFLOP/s for full waves (issue 26's independent model)",
                    tensor_tflops=(("bf16", 989.4), ("f16", 989.4), ("tf32", 494.7)),
                    tensor_sources="NVIDIA H100 SXM datasheet: 989.4 TFLOP/s dense BF16/FP16 tensor, 494.7 TF32 "
                                   "(the sparse figures halved); mma.sync reaches well below it, wgmma near it"),
    "sm_120": Target("sm_120", 120, 99 * 1024, 255, True, False, 1792.0, 104.8, "RTX 5090",
                     sm_count=170, max_threads_per_sm=1536, max_blocks_per_sm=24, smem_per_sm=100 * 1024,
                     l2_bytes=96 << 20, sustained_clock_ghz=2.407, achievable_bandwidth_gbs=1520.0,
                     sources="clock: the RTX 5090's boost clock (104.8 TFLOP/s = 170 SMs x 256 FLOP x 2.407 GHz; "
                             "a consumer part holds it); bandwidth: ~85% of 1792 GB/s; SGEMM: not anchored "
                             "(the peak): calibrate on a device",
                     tensor_tflops=(("bf16", 209.6), ("f16", 209.6), ("tf32", 104.8)),
                     tensor_sources="838.4 TFLOP/s sparse FP16 (NVIDIA's RTX 5090 figure) halved for dense and "
                                    "halved again for FP32 accumulate on a GeForce part; TF32 half of that: "
                                    "an estimate, calibrate on a device"),
}


def get_target(name: str) -> Target:
    if isinstance(name, Target):
        return name
    if name not in TARGETS:
        raise DeplokitError(f"unknown target {name!r}; supported: {', '.join(TARGETS)}")
    return TARGETS[name]
