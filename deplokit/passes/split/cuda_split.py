"""The in-kernel split-K tail printed as CUDA (an advanced feature: `split_tail.py` emits it):
the Kernel-IR statements ThreadFence, AtomicInc and Broadcast, each a function taking the
renderer (passes/lower/cuda.py's _Renderer, here `rd`, whose FEATURE_STATEMENTS table
merges this module's STATEMENTS) as its first argument."""
from __future__ import annotations

from ...ir.kernel_split import AtomicInc, Broadcast, ThreadFence


def render_thread_fence(rd, s: ThreadFence, scope) -> None:
    rd.emit("__threadfence();")


def render_atomic_inc(rd, s: AtomicInc, scope) -> None:
    rd.param(s.buffer, write=True)
    rd.emit(f"int {s.dst} = atomicAdd(&{s.buffer}[{rd.expr(s.offset, scope)}], 1);")
    scope.declare(s.dst, "int")


def render_broadcast(rd, s: Broadcast, scope) -> None:
    rd.emit(f"int {s.dst} = {s.array}[0];")
    scope.declare(s.dst, "int")


# Kernel-IR statement -> the function that prints it (passes/lower/cuda.py's FEATURE_STATEMENTS)
STATEMENTS = {
    ThreadFence: render_thread_fence, AtomicInc: render_atomic_inc, Broadcast: render_broadcast,
}
