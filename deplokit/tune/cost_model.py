"""An analytic cost model: predicted microseconds of a scheduled kernel on a target, no GPU needed.

It prices the work counted on the Tile IR (analysis/work.py) against the target's peaks
(deplokit/target.py) and a few facts of the reference parts below:

    memory   DRAM: the compulsory bytes (plus a share of the re-reads that miss L2);
             L2: every 32-byte sector the warps fetch (uncoalesced access costs here)
    SM       warp instructions issued (4 per SM per clock), FP32/SFU pipe cycles, and
             shared-memory wavefronts (1 per SM per clock: bank conflicts cost here)
    latency  occupancy (resident warps, from threads, registers and shared memory per block)
             hides it: below `mem_occupancy` / `compute_occupancy` the roofs scale down;
             a grid too small for the GPU or a partial last wave leaves SMs idle
    fixed    a launch per kernel, block barriers

    time = launch + max(dram, l2, sm) + overlap * (the other two) + barriers
             (overlap halved for a kernel whose stages are double buffered or prefetched)

Registers and shared memory come from ptxas when its statistics are given (tune/objective.py
compiles each candidate once, and the cache keeps them); otherwise registers are estimated
from the Kernel IR (register arrays and scalars) and shared memory from its arrays. The
constants are a starting point; `calibrate.fit_constants` fits them to GPU measurements.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..ir import kernel_ir as K
from ..analysis.occupancy import occupancy as sm_occupancy
from ..analysis.work import KernelWork, count_work


@dataclass(frozen=True)
class CostConstants:
    launch_us: float = 2.5            # per kernel launch
    l2_bandwidth_ratio: float = 3.0   # L2 bandwidth as a multiple of DRAM's
    l2_miss: float = 0.05             # share of the re-read sectors that go to DRAM
    dram_efficiency: float = 0.85     # of the peak, for a well-fed stream
    mem_occupancy: float = 0.30       # GPU-wide resident warps past which memory latency is hidden
    compute_occupancy: float = 0.20   # the same for the SM pipes
    overlap: float = 0.15             # how much of the non-bounding terms still shows
    barrier_cycles: float = 30.0      # per block barrier, per wave

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class KernelEstimate:
    name: str
    time_us: float
    dram_us: float
    l2_us: float
    sm_us: float
    barrier_us: float
    occupancy: float          # resident warps / the SM's maximum, 0..1
    registers: int
    smem_bytes: int
    bound: str                # dram | l2 | sm
    work: KernelWork | None


@dataclass(frozen=True)
class Estimate:
    kernels: tuple[KernelEstimate, ...]

    @property
    def time_us(self) -> float:
        return sum(k.time_us for k in self.kernels)


class DoesNotFit(Exception):
    """A block that no SM can hold (too many registers or too much shared memory)."""


def estimate_registers(func: K.KernelFunc) -> int:
    """Registers per thread without ptxas: a base for indices and pointers, every register-array
    element and every scalar float (a rough guide; ptxas's count replaces it when given)."""
    arrays = scalars = 0

    def visit(body):
        nonlocal arrays, scalars
        for s in body:
            if isinstance(s, K.DeclareArray):
                arrays += s.size
            elif isinstance(s, K.Declare) and s.ctype == "float":
                scalars += 1
            elif isinstance(s, K.VectorLoad):
                scalars += 4
            elif isinstance(s, K.For):
                visit(s.body)
            elif isinstance(s, K.If):
                visit(s.then)
                visit(s.orelse)
    visit(func.body)
    return min(255, 24 + arrays + min(scalars, 32))


def occupancy(target, threads: int, registers: int, smem: int) -> tuple[int, float]:
    """(resident blocks per SM, resident warps / maximum warps) for one block shape, by
    analysis/occupancy.py's rules on the target's SM limits; DoesNotFit when no block fits."""
    occ = sm_occupancy(target, threads, registers or None, smem or None)
    if occ.blocks_per_sm < 1:
        raise DoesNotFit(f"a block of {threads} threads with {registers} registers each and {smem} bytes of "
                         "shared memory does not fit on an SM")
    return occ.blocks_per_sm, occ.fraction


def kernel_time(work: KernelWork, target, registers: int, smem: int, spills: int = 0,
                constants: CostConstants = CostConstants()) -> KernelEstimate:
    c = constants
    sms, lanes, max_warps = target.sm_count, target.fp32_lanes_per_sm, target.max_threads_per_sm // 32
    clock = target.peak_fp32_tflops * 1e12 / (sms * lanes * 2)          # cycles per second
    per_sm, occ = occupancy(target, work.threads, registers, smem)
    resident = min(work.blocks, sms * per_sm)
    waves = -(-work.blocks // (sms * per_sm))
    gpu_occ = resident * -(-work.threads // 32) / (sms * max_warps)
    mem_eff = min(1.0, gpu_occ / c.mem_occupancy)
    bandwidth = target.peak_bandwidth_gbs * 1e3                          # bytes per µs
    spill_bytes = 2.0 * spills * work.threads * work.blocks
    sectors = work.sector_bytes + spill_bytes + 2 * 4 * work.atomics
    dram = min(work.compulsory_bytes, sectors) + c.l2_miss * max(0.0, sectors - work.compulsory_bytes)
    dram_us = dram / (bandwidth * c.dram_efficiency * mem_eff)
    l2_us = sectors / (bandwidth * c.l2_bandwidth_ratio * mem_eff)
    cycles = max(work.instructions / 4, work.fp_instructions / (lanes / 32), work.smem_wavefronts)
    active = min(sms, work.blocks)
    sm_occ = min(1.0, (occ if work.blocks >= sms else gpu_occ * sms / active) / c.compute_occupancy)
    sm_us = cycles / (active * clock * sm_occ) * 1e6 if cycles else 0.0
    barrier_us = work.barriers * c.barrier_cycles * waves / clock * 1e6
    parts = {"dram": dram_us, "l2": l2_us, "sm": sm_us}
    bound = max(parts, key=parts.get)
    rest = sum(parts.values()) - parts[bound]
    overlap = c.overlap / 2 if work.pipelined else c.overlap     # prefetched copies hide more
    time = c.launch_us + parts[bound] + overlap * rest + barrier_us
    return KernelEstimate(work.name, time, dram_us, l2_us, sm_us, barrier_us, occ, registers, smem, bound, work)


def _zero_time(func: K.KernelFunc, target, constants: CostConstants) -> KernelEstimate:
    """A kernel with no Tile IR behind it (split-K's zero fill): a plain store stream."""
    n = func.threads * func.grid[0] * func.grid[1] * func.grid[2]
    dram_us = 4 * n / (target.peak_bandwidth_gbs * 1e3 * constants.dram_efficiency)
    return KernelEstimate(func.name, constants.launch_us + dram_us, dram_us, 0.0, 0.0, 0.0, 1.0, 16, 0, "dram", None)


def estimate(tile_program, kernel_program, target, stats: dict | None = None,
             constants: CostConstants = CostConstants()) -> Estimate:
    """Predicted time of every kernel of `kernel_program` (materialised from `tile_program`).
    `stats`: kernel name -> runtime.nvcc.KernelStats from ptxas, when compiled."""
    types = tile_program.types()
    tiles = {k.name: k for k in tile_program.kernels}
    out = []
    for func in kernel_program.kernels:
        if func.name not in tiles:
            out.append(_zero_time(func, target, constants))
            continue
        work = count_work(tiles[func.name], types)
        s = (stats or {}).get(func.name)
        registers = s.registers if s else estimate_registers(func)
        smem = max(s.smem_bytes, K.declared_smem_bytes(func)) if s else K.declared_smem_bytes(func)
        spills = s.spills if s else 0
        out.append(kernel_time(work, target, registers, smem, spills, constants))
    return Estimate(tuple(out))


def roofline_us(work: KernelWork, target) -> float:
    """The time no schedule can beat: compulsory bytes at peak bandwidth or the FLOPs at peak."""
    return max(work.compulsory_bytes / (target.peak_bandwidth_gbs * 1e3),
               work.flops / (target.peak_fp32_tflops * 1e6)) if work else 0.0


__all__ = ["CostConstants", "Estimate", "KernelEstimate", "DoesNotFit", "estimate", "kernel_time",
           "occupancy", "estimate_registers", "roofline_us"]
