"""SIMT simulator for Kernel IR: every thread of every block, executed with numpy.

Threads run in lockstep. A per-thread value is a numpy array laid out over
(blocks of the current chunk, threads of a block), kept in its *smallest broadcast shape*:
a constant is 0-d, threadIdx is (1, T), blockIdx is (nb, 1), and only values that depend on
both are (nb, T). Blocks run in chunks of at most `max_threads_in_flight` thread-lanes.

Control flow runs under an *active mask* (None = every thread of the chunk; otherwise a bool
array in broadcast shape). `If` with a per-thread condition runs both sides, each under
`mask & cond` / `mask & ~cond` (masks compose when nested); a condition that is the same for
every active thread runs one side under the unchanged mask. `For` re-tests `var < stop` for
every active thread at each iteration; a thread whose own test fails leaves the loop (its
lane drops out of the mask) and the loop ends when no active thread is left, so a uniform
loop is a plain loop. `&&`, `||` and `Select` evaluate their right-hand / unchosen operands
only under the narrowed mask, like C short-circuiting, so a guarded load never faults.
Assignments change active threads only (np.where with the mask). Every `{ }` (kernel body,
If branch, each loop iteration) opens a lexical scope: a Declare shadows outer names and
vanishes at the end of its block.

Hazards are reported, never silently tolerated, as SimulationError (a DeplokitError):
  * out-of-range global / shared / register-array offsets of an active thread;
  * a store to a read-only (const) parameter;
  * a write-write conflict inside one statement: two active threads of a block storing to
    the same shared element, or two threads storing *different* values to one global
    element (same value is allowed). With check_races=False the conflict is resolved
    deterministically: the highest flat lane wins (as if threads stored in order).
    AtomicAdd is not a conflict: every thread's add lands, applied in lane order, block
    after block (np.add.at), so split-K partial sums add up deterministically;
  * missing __syncthreads (check_races=True, default): per shared array and element, the
    thread that last wrote it since the last Barrier (int32 array, -1 = none, reset at each
    Barrier) and, lazily, the thread that read it (-2 = several threads). A read of an
    element another thread wrote (RAW), a write over another thread's write (WAW) or over
    an element another thread read (WAR) with no Barrier between -> SimulationError. The
    reader table is only built when a write follows reads in the same barrier interval, so
    correct kernels pay for a log append per read;
  * a Barrier reached by only part of a block (divergent control flow);
  * a Shuffle whose source lane is inactive (undefined in CUDA) or outside the block;
  * reading shared data whose cp.async group has not been waited for (CpAsyncCommit closes
    a group, CpAsyncWait(n) completes all committed groups but the newest n), or whose TMA
    load has not completed (an MbarrierWait that observed the phase of its barrier / slot
    that the copy's bytes completed);
  * the mbarrier protocol (exec.py): per barrier and slot, the phases completed, the
    arrivals (MbarrierArrive, a TmaLoad's own arrive.expect_tx) and transaction bytes
    (expect_tx, a copy's complete_tx) of the current one; a wait for a parity whose phase
    never completes while the block waits (a missing arrive or copy, the wrong phase) is a
    deadlock; a TMA copy overwriting elements other threads read, unless a Barrier or an
    mbarrier phase every thread arrived on after reading (a ring's empty barrier) and that
    the issuer waited for ordered the reads before it; a TMA copy over ordinary stores not
    followed by a ProxyFence of their thread;
  * a kernel above the target's shared memory per block (static and dynamic, when the
    caller passes the limit) or whose arrays carved from dynamic shared memory overlap;
  * float4 (VectorLoad/VectorStore) offsets that are not 16-byte aligned, cp.async offsets
    not aligned to their size, TMA offsets/counts not multiples of 16 bytes.

Data model: cp.async copies immediately (it counts as a write by the issuing thread for the
race check) but is marked in flight until waited for; a TMA load copies immediately (checked
at issue against other threads' unsynchronised accesses, like a write by its issuer) and
becomes visible to every thread at the MbarrierWait that completes it. Shared memory starts
as NaN (garbage in CUDA). Register arrays are stored as (size, blocks, threads).

Arithmetic: int is int64 (`/` truncates toward zero as in C, `//` floors, `%` is C's
remainder), float is float32 (never widened to float64; int operands are converted),
`Call.fn` is a deplokit elementwise op name (numpy_ops), C spellings like expf / fmaxf are
accepted too, with C's meaning: fmaxf / fminf return the other operand of a NaN, where
maximum / minimum (and Binary max / min) propagate it, as torch and the printed
deplokit_fmaxf / deplokit_fminf do. Known limits: write-write conflicts across different statements or across
chunks are not detected; cp.async groups are per chunk, not per thread."""
from __future__ import annotations

from .errors import SimulationError
from .exec import MAX_LOOP_ITERATIONS
from .launch import MAX_THREADS_IN_FLIGHT, simulate_kernel, simulate_program
from .stats import SimStats

__all__ = ["MAX_LOOP_ITERATIONS", "MAX_THREADS_IN_FLIGHT", "SimStats", "SimulationError",
           "simulate_kernel", "simulate_program"]
