"""Instructions nvcc issues around each operation of a main loop, besides the operation itself.

Read off sm_90 SASS (nvcc 13) of deplokit's 16x16-thread matmuls with a 4-stage ring, 4x4 register
tile, k chunk 16 (`benchmarks/bench_matmul.py`, analysis/sass_issue.py's split of the K loop into
what every warp issues, what only the elected TMA producer issues, and the out-of-line slow paths,
which are not counted: a failed poll's retry loop and a divergent warp's election run after EXIT).
"""
from __future__ import annotations

OVERHEAD = {
    # per copy: LDGSTS's global address (the pointer moved into registers, IMAD.WIDE, LEA/IADD3 of
    # row and k offsets) and its shared address (ULEA/ULOP3 of the slot): 21 for a 4x4 tile's 2 copies
    "cp_async": 9,
    # per tensor copy: R2UR of its coordinates, UIADD3/UIADD3.X of the tensor map's address, the
    # slot's destination (USHF, ULOP3, UIADD3), UMOVs into the descriptor registers (17 for 2 UTMALDG)
    "tma": 7,
    "global": 2,          # address arithmetic of a global access that is not an immediate offset
    # slot and phase arithmetic (SHF, LOP3 x2, SHF x2), the try_wait's branch, BSSY/BSYNC: 9 with
    # the SYNCS.PHASECHK (the consumer's full wait; the producer's empty wait is 7 of the same)
    "mbarrier_wait": 8,
    "mbarrier_arrive": 0,  # the slot's address is the wait's: a SYNCS.ARRIVE alone (the empty arrive)
    "expect_tx": 1,       # arrive.expect_tx: the byte count's constant (HFMA2.MMA) besides the arrive
    "cp_async_wait": 1,   # LDGDEPBAR / DEPBAR
    # per iteration: counter, compare, branch, the slot index and each operand's slot base for the
    # shared loads (IADD3, ISETP, BRA, LOP3, LEA x4 in the TMA loop)
    "loop": 8,
    # an If in the loop (the steady-state guard `k + stages - 1 < K`): IADD3, ISETP, its branch or
    # predicate (PLOP3)
    "branch": 3,
    # an elected If (elect.sync in warp 0): every warp reaching it, ISETP.OR of tid, BSSY/BSYNC around
    # it, UMOV + BRA.DIV (the convergence check); the elected warp then ELECT and its branch
    "elect_guard": 5,
    "elect": 2,
}

__all__ = ["OVERHEAD"]
