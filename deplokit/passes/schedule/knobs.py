"""Sizes the scheduling passes' knob defaults and budgets share (the knob, Skip and Noted
records themselves live in deplokit/passes/record.py)."""
from __future__ import annotations

from ...ir.tile_ir import THREAD, Combine, walk
from ...target import WARP_SIZE


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def combine_smem(tile) -> int:
    """Shared memory the tile's Combines will take when materialised: one 16-byte aligned
    array of warp partials each (see passes/lower/combine.py)."""
    threads = 1
    for a in tile.axes:
        if a.kind == THREAD:
            threads *= a.extent
    total = 0
    for s, _ in walk(tile.body):
        if isinstance(s, Combine):
            lanes = tile.axis(s.over[0]).extent
            if lanes > WARP_SIZE:
                total += -(-4 * (lanes // WARP_SIZE) * (threads // lanes) // 16) * 16
    return total


def local_smem(kernel) -> int:
    """Shared memory the kernel's locals take once materialised: one row each, one row per
    block (a kernel with locals runs one row per block; see 004 cooperative_reduce)."""
    return sum(4 * b.row_numel for b in kernel.locals)
