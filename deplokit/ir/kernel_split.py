"""The Kernel-IR statements of the in-kernel split-K tail (an advanced feature:
passes/split/split_tail.py emits them, passes/split/cuda_split.py prints them as CUDA,
runtime/sim/split.py runs them): a grid-wide fence, an integer counter's atomic and a
block-wide broadcast. Each prints itself (`text`), which kernel_ir's printer asks of a
statement it does not know."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .kernel_ir import Expr, format_at


@dataclass(frozen=True)
class ThreadFence:
    """__threadfence(): this thread's global writes before it are visible to every block of
    the grid before any write or atomic after it (split-K's partials before its counter)."""

    def text(self) -> str:
        return "threadfence"


@dataclass(frozen=True)
class AtomicInc:
    """int dst = atomicAdd(&buffer[offset], 1): an integer counter's old value (split-K's
    arrivals at a tile; integers add exactly in any order, unlike floats)."""
    dst: str
    buffer: str                   # an int32 kernel parameter
    offset: Expr

    def text(self) -> str:
        return f"int {self.dst} = atomic_inc global {format_at(self.buffer, self.offset)}"


@dataclass(frozen=True)
class Broadcast:
    """int dst = array[0]: what one thread stored into a shared int before a Barrier, read by
    every thread of the block; the same in all of them (a branch on it keeps barriers legal:
    split-K's "this block is the tile's last")."""
    dst: str
    array: str

    def text(self) -> str:
        return f"int {self.dst} = block-uniform shared {self.array}[0]"


SplitStmt = Union[ThreadFence, AtomicInc, Broadcast]
