"""015's producer/consumer (warp-specialised) schedule of a TMA ring, stamped on the ring's
AsyncWait (tile_ir.AsyncWait.roles): a producer warpgroup of its own, past the computing
threads, issues every K tile's tensor-map copies into the ring (waiting on each slot's
empty mbarrier), while the computing threads (the consumers) only wait on the full
mbarriers, multiply and release the slots. The consumers may keep `in_flight` groups of
wgmma.mma_async running across K tiles (wgmma.wait_group in_flight): a slot is then
released one tile later, when the wait says the wgmma that read it are done.
passes/wgmma/warp_roles.py spells it in Kernel IR.

Registers (setmaxnreg, PTX ISA 8.0, sm_90a): a block launched under __launch_bounds__(T, 1)
starts every thread at `entry_registers(T)`; the producer, which only issues copies, gives
registers back (setmaxnreg.dec) and the consumers, which hold the accumulators, take them
(setmaxnreg.inc). Counts are multiples of 8 in [24, 256], executed by whole warpgroups, and
the block's warpgroups together never hold more than the launch gave it (T x entry).
Without a minimum-blocks bound ptxas cannot tell the entry count and drops setmaxnreg
(C7508), so a kernel using it says min_blocks=1."""
from __future__ import annotations

from dataclasses import dataclass

PRODUCER_THREADS = 128      # a whole warpgroup (setmaxnreg and wgmma count warpgroups)
REG_FILE = 65536            # 32-bit registers of an SM (sm_90): what one resident block may hold
MAX_THREAD_REGS = 255       # ptxas's ceiling per thread
SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8     # PTX's rules for the count


def entry_registers(threads: int, min_blocks: int = 1) -> int:
    """Registers a thread holds at entry under __launch_bounds__(threads, min_blocks): the
    register file shared by min_blocks blocks, in whole allocation units of 8, at most 255."""
    per = min(MAX_THREAD_REGS, REG_FILE // (threads * max(1, min_blocks)))
    return per // SETMAXNREG_STEP * SETMAXNREG_STEP


def setmaxnreg_reason(count: int) -> str:
    """'' when `count` is a register count setmaxnreg takes, else why not."""
    if count % SETMAXNREG_STEP or not SETMAXNREG_MIN <= count <= SETMAXNREG_MAX:
        return (f"setmaxnreg {count}: a count is a multiple of {SETMAXNREG_STEP} in "
                f"[{SETMAXNREG_MIN}, {SETMAXNREG_MAX}]")
    return ""


@dataclass(frozen=True)
class WarpRoles:
    producer_threads: int = PRODUCER_THREADS
    in_flight: int = 0      # wgmma groups a consumer leaves running at the end of a K tile
    # setmaxnreg: the producer's and the consumers' registers a thread after the split
    # (0: left at the entry count); passes/wgmma/warp_roles.register_split decides them
    producer_regs: int = 0
    consumer_regs: int = 0

    def text(self) -> str:
        tail = f", {self.in_flight} wgmma group in flight" if self.in_flight else ""
        if self.producer_regs:
            tail += f", setmaxnreg {self.producer_regs} / {self.consumer_regs} registers"
        return f"producer warpgroup of {self.producer_threads} threads issues the copies{tail}"
