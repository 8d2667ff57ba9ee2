"""How many registers a flash-attention thread needs, and how many its block lets it have.

A thread of the flash kernel (flash/flash_tile.py) keeps in registers its slice of the
query row (D / lanes floats, unless the rows are staged in shared memory), its slice of the
output accumulator (Dv / lanes), the scores of one key tile, and the online softmax's
running max and sum; beyond those floats it spends registers on addresses, loop counters
and the key and value quads in flight. An SM's 65536 registers are shared by the threads
of a block that must fit on it, so a block of T threads gets at most 65536 / T registers a
thread (in steps of 8, at most 255): past that, ptxas spills to local memory (512 threads,
head_dim 128, two lanes a row spilled 800 bytes). The plan (attention_plan.py) picks the
query tile and lanes whose estimate fits the cap of their thread count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.tile_ir import Stage, walk

REGISTER_FILE = 65536        # 32-bit registers of an SM (sm_70 .. sm_120)
MAX_THREAD_REGISTERS = 255   # what one thread can address
ALLOCATION_STEP = 8          # ptxas hands out registers per thread in steps of 8
# registers beyond the row's floats, measured by ptxas -v on sm_80 and sm_90 over head_dim
# 64..128, causal and not, GQA/MQA/decode: 56..110, the pipelined K/V ring's addresses and
# lanes' shuffles at the top (head_dim 80 a whole row a thread, 178 floats, spilled 144 bytes)
ROW_OVERHEAD = 96
# without TMA (sm_80's cp.async ring: a thread computes its copies' addresses and bounds) a
# whole row a thread needs more: head_dim 64, 37 keys spilled 24..232 bytes at 255 registers
ROW_OVERHEAD_CP_ASYNC = 112
# a row dealt to lanes: ptxas -v on sm_90 (attention at head_dim 64 and 128, key tile 16)
# gave 128 registers for 82 floats, 82 for 50 (and 248 for 146 with 255 to spare: ptxas
# takes what the cap leaves): about 0.55 of the floats again, at least 32
LANE_OVERHEAD_SHARE = 0.55
LANE_OVERHEAD_MIN = 32
# an SM below 16 resident warps (4 a scheduler) leaves the shared-memory and exp latencies
# of the key loop exposed: the plan deals a row to more lanes while that raises the warps
WARPS_GOAL = 16
MAX_WARPS = 64               # resident warps an SM (sm_80 .. sm_90)
MAX_BLOCKS = 32              # resident blocks an SM
MIN_BOUND_REGISTERS = 128    # flash_min_blocks binds ptxas only where a thread keeps this many


@dataclass(frozen=True)
class RegisterBudget:
    """A thread's estimated registers against the cap its block's thread count implies."""
    threads: int
    estimate: int
    cap: int

    @property
    def fits(self) -> bool:
        return self.estimate <= self.cap

    @property
    def warps(self) -> int:
        """Resident warps an SM at this estimate."""
        return resident_warps(self.estimate, self.threads)

    def text(self) -> str:
        verdict = "fit" if self.fits else "exceed"
        return f"about {self.estimate} registers a thread {verdict} the cap of {self.cap} for {self.threads} threads"


def register_cap(threads: int) -> int:
    """Registers a thread may use when a block of `threads` must fit one SM's register file."""
    per_thread = REGISTER_FILE // max(1, threads) // ALLOCATION_STEP * ALLOCATION_STEP
    return min(MAX_THREAD_REGISTERS, per_thread)


def thread_registers(d: int, dv: int, key_tile: int, lanes: int, query_in_registers: bool = True,
                     tma: bool = True, rows: int = 1) -> int:
    """The estimate: the query slice, the output slice, a key tile's scores, max and sum, overhead.
    Two rows a thread (FlashPlan.rows): each row's output slice, scores, max and sum, and the
    quads in flight of the head_dim-outer score loop (a q quad of each row, a K quad)."""
    if rows > 1:
        floats = rows * (dv // lanes + key_tile + 2) + 4 * (rows + 1)
        return floats + max(LANE_OVERHEAD_MIN, math.ceil(floats * LANE_OVERHEAD_SHARE))
    floats = (d // lanes if query_in_registers else 0) + dv // lanes + key_tile + 2
    if lanes > 1:
        return floats + max(LANE_OVERHEAD_MIN, math.ceil(floats * LANE_OVERHEAD_SHARE))
    return floats + (ROW_OVERHEAD if tma else ROW_OVERHEAD_CP_ASYNC)


def resident_warps(registers: int, threads: int) -> int:
    """Warps an SM keeps resident when each of a block's `threads` uses `registers` (the
    register file, the block and warp limits; shared memory is not counted here)."""
    per_thread = -(-registers // ALLOCATION_STEP) * ALLOCATION_STEP
    warps = -(-threads // 32)
    blocks = min(MAX_BLOCKS, REGISTER_FILE // (per_thread * warps * 32), MAX_WARPS // warps)
    return blocks * warps


def budget(d: int, dv: int, key_tile: int, lanes: int, threads: int, query_in_registers: bool = True,
           tma: bool = True, rows: int = 1) -> RegisterBudget:
    return RegisterBudget(threads, thread_registers(d, dv, key_tile, lanes, query_in_registers, tma, rows),
                          register_cap(threads))


def flash_min_blocks(kernel, threads: int) -> int:
    """Blocks an SM must hold at once for a flash kernel whose scores are scattered over its
    lanes (FlashPlan.scatter), as its register estimate counts them: head_dim 128, 4 lanes a
    row, 256 threads is 128 registers, 2 blocks; ptxas took 130 without the bound (1 block, 8
    warps an SM). 0 (no bound) for any other kernel and where one block is all it counts on."""
    plan = getattr(kernel, "flash", None)
    if plan is None or not plan.scatter or getattr(plan, "mma", None) is not None:
        return 0
    # the estimate is calibrated on tensor-map copies: a cp.async ring (sm_80) needs more
    # (head_dim 128, 4 lanes, 128 threads bound to 128 registers spilled 32 bytes there)
    if not any(isinstance(s, Stage) and s.tma is not None for s, _ in walk(kernel.tile().body)):
        return 0
    # the register tiles are the thread's query slice, a key tile's scores and its output slice
    floats = sum(r.size for r in kernel.register_tiles) + 2
    estimate = floats + max(LANE_OVERHEAD_MIN, math.ceil(floats * LANE_OVERHEAD_SHARE))
    blocks = resident_warps(estimate, threads) // -(-threads // 32)
    # only where that leaves a thread at least MIN_BOUND_REGISTERS: below, the estimate is too
    # loose to bind ptxas by (64-thread blocks at 10 an SM, 102 registers, spilled 24..32 bytes)
    if blocks < 2 or REGISTER_FILE // (threads * blocks) < MIN_BOUND_REGISTERS:
        return 0
    return blocks
