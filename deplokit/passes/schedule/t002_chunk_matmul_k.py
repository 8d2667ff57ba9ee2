"""002 chunk_matmul_k: split a matmul's K reduce into K-outer x K-inner chunks.

    for k in 0..K  ->  for ko in 0..K/BK: for ki in 0..BK   (+ a tail loop for K % BK)

Inside one K-outer iteration the block works on a BK-wide slab of both operands: what
stage_inputs copies to shared memory, and what double buffering overlaps."""
from __future__ import annotations

from ...ir.index import var
from ...ir.loop_ir import Loop
from ...ir.substitute import substitute_body
from ...ir.tile_ir import Tile, TileKernel
from ..record import KernelPass, Knob, PassContext, Skip, replace_tile
from .grid_plan import mma_kind, output_extents, wgmma_output

DESCRIPTION = "chunk the K reduce into K-outer x K-inner (intra-CTA)"


def _k_loop(kernel: TileKernel):
    try:
        body = kernel.tile().body
    except ValueError:
        return None
    for s in body:
        if isinstance(s, Loop) and s.role == "K":
            return s
    return None


def _default_chunk(kernel, target) -> int:
    k = _k_loop(kernel)
    if k is not None and k.extent >= 2 * WGMMA_CHUNK and mma_kind(kernel, target) == "wgmma":
        extents, _ = output_extents(kernel.tile())
        if wgmma_output(extents["M"], extents["N"], target):
            return WGMMA_CHUNK
    return 16 if k is None or k.extent >= 16 else 8


# wgmma (008 on sm_90): 64 halves of K are one 128-byte row of A's box, the widest swizzle
WGMMA_CHUNK = 64


KNOBS = (Knob("k_chunk", (4, 8, 16, 32, 64), _default_chunk, "K-inner chunk width (BK)"),)


def apply(kernel: TileKernel, pctx: PassContext):
    loop = _k_loop(kernel)
    if loop is None:
        return Skip("no matmul K loop")
    if any(isinstance(s, Loop) and s.role == "K" for s in loop.body):
        return Skip("K already chunked")
    bk = pctx.knobs["k_chunk"]
    K = loop.extent
    if K < 2 * bk:
        return Skip(f"K={K} is less than two chunks of {bk}")
    ko, ki, kt = f"{loop.var}o", f"{loop.var}i", f"{loop.var}t"
    n_main = K // bk
    main_body = substitute_body(loop.body, {loop.var: var(ko) * bk + var(ki)}, {ko: n_main, ki: bk})
    out = [Loop(ko, n_main, "reduce", (Loop(ki, bk, "reduce", main_body, "K"),), "K")]
    if K % bk:
        tail = substitute_body(loop.body, {loop.var: var(kt) + n_main * bk}, {kt: K % bk})
        out.append(Loop(kt, K % bk, "reduce", tail, "K"))
    tile = kernel.tile()
    body = []
    for s in tile.body:
        body.extend(out if s is loop else [s])
    new_tile = Tile(tile.axes, tuple(body))
    return replace_tile(kernel, new_tile)


PASS = KernelPass("002_chunk_matmul_k", "tile", DESCRIPTION, apply, KNOBS)
