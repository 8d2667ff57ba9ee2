"""Grid fill: what the guard's counts of bytes and work leave out when a fusion launches few
blocks (attention.py's cost check).

A kernel's blocks are dealt to the GPU's SMs; with fewer blocks than SMs the others stay
idle, and the kernel moves its bytes and does its work with that share of the GPU. Flash
attention launches batch x kv-head groups x query tiles blocks (TinyLlama at seq 128: 32
on an H100's 132 SMs); the kernels it replaces deal their S x T scores to blocks of about
BLOCK_OUTPUTS outputs each. Each side's time is estimated as

    time = LAUNCH_US per kernel + max(bytes / bandwidth, flops / peak) / min(1, blocks / SMs)

summed over the unfused kernels (each its own blocks) with the target's peaks. Crude on
purpose, and said so in the trace: it counts blocks, not warps per SM nor latency; the
fusion stays a tuner knob (fuse_attention.enable), which a measurement can overrule.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...analysis.traffic import loop_kernel_cost
from .guard import Traffic

LAUNCH_US = 2.5        # one kernel launch back to back (the tuner's cost model assumes the same)
BLOCK_OUTPUTS = 4096   # outputs per block of a tiled kernel: the 64 x 64 tiles the schedule aims at


@dataclass(frozen=True)
class Estimate:
    us: float              # estimated time, microseconds
    launches: int
    blocks: int            # blocks launched (every kernel's, summed)
    fill: float            # the smallest share of the SMs a kernel's blocks cover

    def text(self) -> str:
        return (f"{self.us:.3g} us ({self.launches} launch{'es' if self.launches > 1 else ''} of "
                f"{LAUNCH_US:g} us, {self.blocks} block{'s' if self.blocks > 1 else ''}, fill {self.fill:.2f})")


def estimate(traffic: Traffic, blocks: int, target) -> Estimate:
    """One kernel moving traffic.bytes and doing traffic.flops with `blocks` blocks."""
    fill = min(1.0, blocks / target.sm_count) if target.sm_count else 1.0
    roof = max(traffic.bytes / (target.peak_bandwidth_gbs * 1e3), traffic.flops / (target.peak_fp32_tflops * 1e6))
    return Estimate(LAUNCH_US + roof / max(fill, 1e-9), 1, blocks, fill)


def unfused_estimate(chain, types, target) -> Estimate:
    """The chain's kernels one after another, each with a block per BLOCK_OUTPUTS outputs."""
    parts = []
    for k in chain:
        cost = loop_kernel_cost(k, types)
        outputs = sum(types[name].numel for name in k.outputs)
        parts.append(estimate(Traffic(cost.bytes, cost.flops), max(1, -(-outputs // BLOCK_OUTPUTS)), target))
    return Estimate(sum(p.us for p in parts), len(parts), sum(p.blocks for p in parts), min(p.fill for p in parts))
