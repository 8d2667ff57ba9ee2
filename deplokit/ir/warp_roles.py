"""015's producer/consumer (warp-specialised) schedule of a TMA ring, stamped on the ring's
AsyncWait (tile_ir.AsyncWait.roles): a producer warpgroup of its own, past the computing
threads, issues every K tile's tensor-map copies into the ring (waiting on each slot's
empty mbarrier), while the computing threads (the consumers) only wait on the full
mbarriers, multiply and release the slots. The consumers may keep `in_flight` groups of
wgmma.mma_async running across K tiles (wgmma.wait_group in_flight): a slot is then
released one tile later, when the wait says the wgmma that read it are done.
passes/wgmma/warp_roles.py spells it in Kernel IR."""
from __future__ import annotations

from dataclasses import dataclass

PRODUCER_THREADS = 128      # a whole warpgroup (setmaxnreg and wgmma count warpgroups)


@dataclass(frozen=True)
class WarpRoles:
    producer_threads: int = PRODUCER_THREADS
    in_flight: int = 0      # wgmma groups a consumer leaves running at the end of a K tile

    def text(self) -> str:
        tail = f", {self.in_flight} wgmma group in flight" if self.in_flight else ""
        return f"producer warpgroup of {self.producer_threads} threads issues the copies{tail}"
