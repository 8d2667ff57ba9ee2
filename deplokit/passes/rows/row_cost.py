"""What row fusion costs, against the kernels it replaces (the fusion guard's inputs).

A row-fused kernel runs one block per row of its row loops, and a block shares nothing with
the others: every global element a row reads is fetched for that row. So its traffic is, per
load and store, the elements one row touches (the extents of the inner loops its index
depends on) times the number of rows; a K or V row read by all S query rows of a head is
fetched S times. The unfused kernels are priced at their compulsory traffic (each tensor
read once, each written once: analysis's one definition of a byte), the scores and the
probabilities included. Both do the same arithmetic, counted the same way.
"""
from __future__ import annotations

from ...analysis.traffic import loop_kernel_cost, loop_kernel_flops
from ...ir.index import free_vars
from ...ir.loop_ir import Kernel, Load, Store, walk
from ..fuse.guard import Traffic


def unfused_traffic(chain, types) -> Traffic:
    costs = [loop_kernel_cost(k, types) for k in chain]
    return Traffic(sum(c.bytes for c in costs), sum(c.flops for c in costs))


def row_fused_traffic(kernel: Kernel, row_depth: int, types) -> Traffic:
    """Bytes the merged kernel moves with one block per row: `row_depth` outer loops are
    the rows; loads and stores of its locals stay on chip."""
    local = {b.name for b in kernel.locals}
    rows, body = 1, kernel.body
    for _ in range(row_depth):
        loop = body[-1]
        rows *= loop.extent
        body = loop.body
    seen, per_row = set(), 0
    for s, loops in walk(body):
        if not isinstance(s, (Load, Store)) or s.tensor in local or (s.tensor, s.index) in seen:
            continue
        seen.add((s.tensor, s.index))
        used = set().union(*(free_vars(e) for e in s.index)) if s.index else set()
        elements = 1
        for lp in loops:
            if lp.var in used:
                elements *= lp.extent
        per_row += elements * types[s.tensor].itemsize
    return Traffic(rows * per_row, loop_kernel_flops(kernel))
