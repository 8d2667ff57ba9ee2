"""Theoretical occupancy of a kernel on a target, as CUDA's occupancy calculator computes it:
how many blocks of the kernel fit on one SM at once, limited by threads, registers, shared
memory and the block-slot count, and the resident warps that gives out of the SM's maximum."""
from __future__ import annotations

from dataclasses import dataclass

REG_ALLOC_UNIT = 256          # registers are allocated per warp in chunks of 256
SMEM_ALLOC_UNIT = 128         # bytes
SMEM_RESERVED_PER_BLOCK = 1024  # sm_80+: the driver keeps 1 KB of each block's shared memory


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limiter: str              # threads | registers | smem | blocks

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0


def occupancy(target, threads: int, registers: int | None, smem_bytes: int | None) -> Occupancy:
    """Resident blocks and warps per SM for blocks of `threads` threads using `registers` per
    thread (None: not known, not a limit) and `smem_bytes` of shared memory per block."""
    if threads < 1:
        raise ValueError(f"a block needs at least one thread, got {threads}")
    warps = -(-threads // target.warp_size)
    max_warps = target.max_threads_per_sm // target.warp_size
    limits = {"blocks": target.max_blocks_per_sm, "threads": max_warps // warps}
    if registers:
        regs_per_warp = -(-registers * target.warp_size // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limits["registers"] = (target.regs_per_sm // regs_per_warp) // warps
    if smem_bytes:
        per_block = -(-(smem_bytes + SMEM_RESERVED_PER_BLOCK) // SMEM_ALLOC_UNIT) * SMEM_ALLOC_UNIT
        limits["smem"] = target.smem_per_sm // per_block
    # The first of the tightest limits, in a fixed order, so ties name the same limiter.
    limiter = min(("threads", "registers", "smem", "blocks"), key=lambda k: limits.get(k, 1 << 30))
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * warps, max_warps, limiter)


def sm_balance(blocks: int, sm_count: int) -> float:
    """How evenly `blocks` blocks load `sm_count` SMs: the mean blocks per SM over the busiest
    SM's (ceil(blocks / sm_count)); 1.0 for whole waves. 148 blocks on 132 SMs: 0.56 (16 SMs
    run two, 116 one, and the kernel lasts as long as the two)."""
    if blocks < 1 or sm_count < 1:
        return 0.0
    return blocks / (sm_count * -(-blocks // sm_count))


BALANCED = 0.90          # SM balance a grid should reach ...
MANY_PER_SM = 8          # ... unless it gives each SM at least this many blocks (the tail is small)


def balanced(blocks: int, sm_count: int) -> bool:
    """Whether a grid of `blocks` keeps `sm_count` SMs evenly loaded (issue 26's bar)."""
    return blocks >= MANY_PER_SM * sm_count or sm_balance(blocks, sm_count) >= BALANCED
