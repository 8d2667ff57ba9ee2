"""An analytic cost model: predicted microseconds of a scheduled kernel on a target, no GPU needed.

It prices the work counted on the Tile IR (analysis/work.py) against the target's peaks
(deplokit/target.py) and a few facts of the reference parts below:

    memory   DRAM: the compulsory bytes (plus a share of the re-reads that miss L2);
             L2: every 32-byte sector the warps fetch (uncoalesced access costs here)
    SM       warp instructions issued (4 per SM per clock), FP32/SFU pipe cycles, and
             shared-memory wavefronts (1 per SM per clock: bank conflicts cost here)
    latency  occupancy (resident warps, from threads, registers and shared memory per block)
             hides it: below `mem_occupancy` the memory roofs scale down; an SM issues
             min(4, resident warps x `warp_issue`) instructions a clock (a single warp
             issues one at most, and less when its instructions depend on each other);
             a kernel whose stage ring keeps bandwidth x `latency_cycles` bytes in flight
             GPU-wide (Little's law) streams at the full DRAM rate with few warps;
             a grid too small for the GPU or a partial last wave leaves SMs idle
    fixed    a launch per kernel, block barriers, and an in-kernel split-K tail's round trips
             (fence, counter atomic, partials: the tail's bytes are in dram/l2 above, counted
             for one block in `splits`, the tile's last)

    main loop the kernel's hottest loop as nvcc issues it (tune/sass_model/main_loop.py, predicted from
             the Kernel IR): issue slots per FFMA (loads, copies, waits and bookkeeping
             besides the FFMA), shared-memory wavefronts by load width, the resident blocks
             of each wave (the last, partial wave costs a whole one: the tail), and latency
             cover per stage (the compute of the passes a stage is fetched ahead of, against
             a global load's latency); for a matmul-like kernel's loop of FFMA off shared
             memory (its K loop) that time is the SM term

    time = launch + max(dram, l2, sm) + overlap * (the other two) + barriers + tail
             (overlap halved for a kernel whose stages are double buffered or prefetched)

Cycles are priced at the target's sustained clock, bytes at its achievable bandwidth, and no
FP32 kernel is priced faster than the target's cuBLAS-class SGEMM rate, no tensor-core kernel
(a main loop of mma.sync) faster than the target's dense tensor-core peak for its input type
(Target's data, with their sources). `estimate` prices every kernel of a program, split-K reducers and zero fills
included: the model objective's trial is the sum.

Registers and shared memory come from ptxas when its statistics are given (tune/objective.py
compiles each candidate once, and the cache keeps them); otherwise registers are estimated
from the Kernel IR (register arrays and scalars) and shared memory from its arrays. The
constants are a starting point; `calibrate.fit_constants` fits them to GPU measurements.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..analysis.occupancy import occupancy as sm_occupancy
from ..analysis.occupancy import sm_balance
from ..analysis.traffic import floor_flops, program_cost
from ..analysis.work import KernelWork, count_work
from ..ir import kernel_ir as K
from ..ir.loop_ir import Loop
from ..ir.tile_ir import walk
from ..passes.schedule.t001_tileify import half_operands
from .sass_model.main_loop import MainLoop, main_loop


@dataclass(frozen=True)
class CostConstants:
    launch_us: float = 2.5            # per kernel launch
    l2_bandwidth_ratio: float = 3.0   # L2 bandwidth as a multiple of DRAM's
    l2_miss: float = 0.05             # share of the re-read sectors that go to DRAM
    dram_efficiency: float = 1.0      # of the target's achievable bandwidth (Target.bandwidth_gbs)
    mem_occupancy: float = 0.30       # GPU-wide resident warps past which memory latency is hidden
    warp_issue: float = 0.5           # instructions one warp issues per clock outside a main loop
                                      # (a dependent FP32 op waits ~4 clocks; straight-line code
                                      # has a little ILP): an SM's 4 schedulers fill at 8 warps
    overlap: float = 0.15             # how much of the non-bounding terms still shows
    barrier_cycles: float = 30.0      # per block barrier, per wave
    latency_cycles: float = 800.0     # a global -> shared copy, issue to arrival

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
    loop: MainLoop | None = None
    loop_us: float = 0.0      # the main loop's time (part of sm_us when it bounds it)
    waves: int = 0
    tail: float = 1.0         # share of the last wave's SM slots that hold a block
    cover: float = 0.0        # compute of the passes a stage is fetched ahead of / its latency


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
    element and every scalar float (a rough guide; ptxas's count replaces it when given).
    Scalars are capped at 32 (nvcc reuses them), except the global loads of a loop-free body:
    nvcc issues them all up front, each into its own register (split-K's reducer: one per
    split and output)."""
    arrays = scalars = 0
    loaded = 0
    looped = any(isinstance(s, K.For) for s in func.body)

    def visit(body):
        nonlocal arrays, scalars, loaded
        for s in body:
            if isinstance(s, K.DeclareArray):
                arrays += s.size
            elif isinstance(s, K.Declare) and s.ctype == "float":
                scalars += 1
                loaded += isinstance(s.init, K.GlobalLoad)
            elif isinstance(s, K.VectorLoad):
                scalars += 4
                loaded += 4 * (s.space == "global")
            elif isinstance(s, K.For):
                visit(s.body)
            elif isinstance(s, K.If):
                visit(s.then)
                visit(s.orelse)
    visit(func.body)
    live = min(scalars, 32) if looped else max(min(scalars, 32), loaded)
    return min(255, 24 + arrays + live)


def occupancy(target, threads: int, registers: int, smem: int) -> tuple[int, float]:
    """(resident blocks per SM, resident warps / maximum warps) for one block shape, by
    analysis/occupancy.py's rules on the target's SM limits; DoesNotFit when no block fits."""
    occ = sm_occupancy(target, threads, registers or None, smem or None)
    if occ.blocks_per_sm < 1:
        raise DoesNotFit(f"a block of {threads} threads with {registers} registers each and {smem} bytes of "
                         "shared memory does not fit on an SM")
    return occ.blocks_per_sm, occ.fraction


@dataclass(frozen=True)
class LoopTime:
    us: float
    cover: float              # >= 1: the copies arrive before the compute needs them
    bound: str                # issue | smem | latency


def main_loop_time(loop: MainLoop, threads: int, per_sm: int, waves: int, clock: float, pipelined: bool | int,
                   constants: CostConstants = CostConstants()) -> LoopTime:
    """Every wave runs `loop.passes` passes on each SM with `per_sm` resident blocks: a pass
    takes the SM the longest of its warps' issue slots (4 schedulers), their wavefronts (one a
    clock) and a stage's latency not covered by the passes it was fetched ahead of
    (`pipelined`: that many passes, 015's prefetch distance; True is one)."""
    warps = per_sm * -(-threads // 32)
    # a main loop's FFMAs are independent (one per register-block output): a warp issues one
    # a clock, so fewer than 4 warps leave schedulers idle
    issue = warps * loop.issue / min(4, warps)
    smem = warps * loop.wavefronts
    compute = max(issue, smem)
    ahead = int(pipelined)                 # passes a stage is fetched ahead of its use (True: one)
    cover = ahead * compute / constants.latency_cycles
    # Without a prefetch a block waits a whole latency per stage; the SM's other blocks fill it.
    latency = constants.latency_cycles / ahead if ahead else constants.latency_cycles + compute / per_sm
    parts = {"issue": issue, "smem": smem, "latency": latency}
    bound = max(parts, key=parts.get)
    return LoopTime(waves * loop.passes * parts[bound] / clock * 1e6, cover, bound)


def kernel_time(work: KernelWork, target, registers: int, smem: int, spills: int = 0,
                constants: CostConstants = CostConstants(), loop: MainLoop | None = None,
                straight: bool = False) -> KernelEstimate:
    """`straight`: the kernel has no loop, so nvcc issues all of a thread's loads before their
    first use (split-K's reducer: S partials per output, one register each, all in flight)."""
    c = constants
    sms, lanes, max_warps = target.sm_count, target.fp32_lanes_per_sm, target.max_threads_per_sm // 32
    clock = target.clock_hz                                             # sustained, cycles per second
    per_sm, occ = occupancy(target, work.threads, registers, smem)
    resident = min(work.blocks, sms * per_sm)
    waves = -(-work.blocks // (sms * per_sm))
    gpu_occ = resident * -(-work.threads // 32) / (sms * max_warps)
    bandwidth = target.bandwidth_gbs * 1e3                               # achievable, bytes per µs
    # Memory latency is hidden by warps waiting on loads, or (Little's law) by the bytes a
    # stage ring keeps in flight: bandwidth x latency of them saturate DRAM, however few warps
    ahead = work.requested_bytes / work.blocks if straight and work.blocks else bytes_in_flight(work)
    in_flight = resident * ahead / (bandwidth * 1e6 / clock * c.latency_cycles)
    mem_eff = min(1.0, max(gpu_occ / c.mem_occupancy, in_flight))
    spill_bytes = 2.0 * spills * work.threads * work.blocks
    sectors = work.sector_bytes + spill_bytes
    dram = min(work.compulsory_bytes, sectors) + c.l2_miss * max(0.0, sectors - work.compulsory_bytes)
    dram_us = dram / (bandwidth * c.dram_efficiency * mem_eff)
    l2_us = sectors / (bandwidth * c.l2_bandwidth_ratio * mem_eff)
    # an SM's issue rate: its resident warps (of this grid) at `warp_issue` each, 4 at most
    warps_per_sm = min(per_sm, -(-work.blocks // sms)) * -(-work.threads // 32)
    rate = min(4.0, warps_per_sm * c.warp_issue)
    cycles = max(work.instructions / rate, work.fp_instructions / (lanes / 32), work.smem_wavefronts)
    # the grid runs as long as its busiest SM: the work over SMs x SM balance (148 blocks on 132
    # SMs, balance 0.56: 2 blocks of 148 on the busiest, not 1 of 132)
    balance = sm_balance(work.blocks, sms)
    sm_us = cycles / (sms * balance * clock) * 1e6 if cycles and balance else 0.0
    tail = work.blocks / (waves * sms * per_sm)
    # A main loop of multiply-adds off shared memory (a matmul's K loop) is priced as nvcc
    # issues it; other kernels keep the Tile-IR counts above.
    looped = (
        main_loop_time(
            loop, work.threads, min(per_sm, -(-work.blocks // sms)), waves, clock, work.prefetch or work.pipelined, c
        )
        if loop is not None and loop.ffma and loop.shared_loads
        else None
    )
    if looped is not None:
        sm_us = looped.us
    sm_us = max(sm_us, compute_floor_us(work, target))
    barrier_us = work.barriers * c.barrier_cycles * waves / clock * 1e6
    parts = {"dram": dram_us, "l2": l2_us, "sm": sm_us}
    bound = max(parts, key=parts.get)
    rest = sum(parts.values()) - parts[bound]
    overlap = c.overlap / 2 if work.pipelined else c.overlap     # prefetched copies hide more
    # an in-kernel split-K tail: the tile's last block waits out its fence, its counter's
    # atomic and its partials' loads one after another once the main loop is done
    tail_us = work.tail_round_trips * c.latency_cycles / clock * 1e6
    time = c.launch_us + parts[bound] + overlap * rest + barrier_us + tail_us
    return KernelEstimate(work.name, time, dram_us, l2_us, sm_us, barrier_us, occ, registers, smem, bound, work,
                          loop, looped.us if looped else 0.0, waves, tail, looped.cover if looped else 0.0)


def compute_floor_us(work: KernelWork, target) -> float:
    """The fastest the kernel's arithmetic can run: its FP32 FLOPs at cuBLAS's SGEMM rate,
    plus those of a main loop of mma.sync at the target's dense tensor-core peak for its
    input type (Target.tensor_tflops; the FP32 rate where the target has none). The rates are
    the whole GPU's, over the grid's SM balance: the busiest SM does ceil(blocks / SMs) blocks'
    share at 1 / SMs of them (38 blocks of one matmul on 132 SMs: 1 / 38 of its FLOPs at 1 /
    132 of the rate)."""
    fp32 = (work.flops - work.tensor_flops) / (target.fp32_tflops * 1e6)
    rate = target.tensor_rate(work.tensor_dtype) or target.fp32_tflops
    floor = fp32 + (work.tensor_flops / (rate * 1e6) if work.tensor_flops else 0.0)
    balance = sm_balance(work.blocks, target.sm_count)
    return floor / balance if balance else floor


def bytes_in_flight(work: KernelWork) -> float:
    """Global bytes one block has requested ahead of its compute: the stages its ring fetches
    ahead (015's prefetch distance of stages + 1 slots; a double buffer: one of its two), 0
    for a kernel without staged copies."""
    if not work.stage_bytes or not work.pipelined:
        return 0.0
    ahead = max(1, work.prefetch)
    return work.stage_bytes * ahead / (ahead + 1)


def _zero_time(func: K.KernelFunc, target, constants: CostConstants) -> KernelEstimate:
    """A kernel with no Tile IR behind it (split-K's zero fill): a plain store stream."""
    n = func.threads * func.grid[0] * func.grid[1] * func.grid[2]
    dram_us = 4 * n / (target.bandwidth_gbs * 1e3 * constants.dram_efficiency)
    return KernelEstimate(func.name, constants.launch_us + dram_us, dram_us, 0.0, 0.0, 0.0, 1.0, 16, 0, "dram", None)


def loop_free(kernel) -> bool:
    """A kernel whose threads run straight-line code (vector loops aside: unrolled)."""
    return not any(isinstance(s, Loop) and s.kind != "vector" for s, _ in walk(kernel.tile().body))


def matmul_like(kernel) -> bool:
    """A kernel whose threads own output tiles (axes of role M / N): the main loop prices it."""
    return any(a.role in ("M", "N") for a in kernel.tile().axes)


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
        loop = main_loop(func) if matmul_like(tiles[func.name]) else None
        out.append(kernel_time(work, target, registers, smem, spills, constants, loop, loop_free(tiles[func.name])))
    return Estimate(tuple(out))


def roofline_us(work: KernelWork, target) -> float:
    """The time no schedule can beat: compulsory bytes at peak bandwidth or the FLOPs at peak
    (an mma.sync main loop's at the tensor-core peak for its input type)."""
    if not work:
        return 0.0
    rate = target.tensor_rate(work.tensor_dtype) or target.peak_fp32_tflops
    flops_us = (work.flops - work.tensor_flops) / (target.peak_fp32_tflops * 1e6) + work.tensor_flops / (rate * 1e6)
    return max(work.compulsory_bytes / (target.peak_bandwidth_gbs * 1e3), flops_us)


__all__ = [
    "CostConstants",
    "bytes_in_flight",
    "Estimate",
    "KernelEstimate",
    "DoesNotFit",
    "estimate",
    "kernel_time",
    "main_loop_time",
    "matmul_like",
    "LoopTime",
    "occupancy",
    "estimate_registers",
    "roofline_us",
]


_SHORT_HALF = {"bfloat16": "bf16", "float16": "f16"}     # Target.tensor_tflops' names


def first_principles_us(loop_program, target) -> float:
    """The floor of a whole program on `target`: its compulsory bytes (inputs and outputs,
    no temporaries: analysis/traffic.program_cost) at the achievable DRAM bandwidth, or its
    FLOPs at the cuBLAS-class FP32 rate (a matmul of half operands at the target's dense
    tensor-core rate for them), whichever is longer, plus one launch. FLOPs count each value
    over the loops it depends on (traffic.floor_flops): a staged prologue once per element of
    its operand."""
    cost = program_cost(loop_program)
    types = loop_program.types()
    compute_us = 0.0
    for k in loop_program.kernels:
        rate = target.tensor_rate(_SHORT_HALF.get(half_operands(k, types), "")) or target.fp32_tflops
        compute_us += floor_flops(k) / (rate * 1e6)
    return CostConstants().launch_us + max(cost.bytes / (target.bandwidth_gbs * 1e3), compute_us)

