"""012 swizzle_smem: write each TMA stage's box swizzled, and read it back the same way.

A staged tile is row-major in shared memory. When a warp reads down a column of a tile of
16-float rows (the A or B fragment of a register-tiled matmul reading x_smem[m, k] for
16 m at one k), lane i reads word 16 i + k: 16 words in 2 banks, an 8-way conflict. A
tensor-map copy can write its box *swizzled*: the 16-byte chunk index of every address is
XORed with its 128-byte row (deplokit.ir.swizzle), so consecutive rows put the same column
in different chunks, hence different banks. Unlike a pad (014), the swizzle costs no shared
memory and keeps the box the tensor map copies; but every read pays a few integer
instructions for the XOR, so a box whose reads are conflict free stays unswizzled.

The swizzle span is the box's inner row: 128, 64 or 32 bytes (32, 16 or 8 floats), the
hardware's three modes; a box whose inner row is none of these, or whose bytes are not a
whole swizzle pattern, stays unswizzled. The pass stamps the span on the stage
(Stage.tma.swizzle, printed swizzle=64B): the copy's tensor map is encoded with it, and
every read of the stage applies the same XOR (the lowering of stage loads, the bank model
of analysis/banks.py, the simulator's copy). A stage is swizzled only where its reads take
fewer wavefronts so (banks.stage_cost, every warp and register slot); the trace prints them
before -> after.

    w_smem = TmaBufferedStage(w, origin=(a1b * 128, a2o * 16), slab=(a1:128@0, a2i:16@1), tmap=128x16)
  ->                                                    (B-fragment reads: worst conflict 16 -> 8)
    w_smem = TmaBufferedStage(w, origin=(a1b * 128, a2o * 16), slab=(a1:128@0, a2i:16@1), tmap=128x16,swizzle=64B)
        in1 = load w_smem[a1r * 16 + a1t, a2i]      # word 16 n + (k ^ (((n >> 1) & 3) << 2))
"""
from __future__ import annotations

import dataclasses

from ...analysis.banks import stage_cost
from ...ir.tile_ir import Stage, Tile, WarpgroupMma, map_body, walk
from ..record import KernelPass, Noted, PassContext, Skip, flag_knob, replace_tile
from ..tma.tma_geometry import swizzle_for

DESCRIPTION = "swizzle TMA stages' shared-memory boxes (128/64/32-byte XOR) against bank conflicts"

def _wgmma(kernel) -> bool:
    mma = getattr(kernel, "mma", None)
    return mma is not None and bool(mma.wgmma)


# wgmma's descriptors read swizzled boxes: the tuner keeps the swizzle there
_FLAG = flag_knob("enable", "write TMA boxes swizzled (128/64/32 bytes) and XOR every read of them", "swizzling")
KNOBS = (dataclasses.replace(_FLAG, searched=lambda k, t: (True,) if _wgmma(k) else (True, False)),)


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    stages = {s.name: s for s, _ in walk(tile.body) if isinstance(s, Stage) and s.copy == "tma" and s.tma}
    if not stages:
        return Skip("no TMA stage (011 tma_copy did not apply)")
    spans, reasons = {}, []
    # wgmma's descriptors read its operands' boxes in the swizzle of their rows: no choice
    forced = {n for s, _ in walk(tile.body) if isinstance(s, WarpgroupMma) for n in (s.a, s.b)}
    for s in stages.values():
        span, why = swizzle_for(s.tma)
        if why:
            reasons.append(f"{s.name}: {why}")
        elif not s.tma.swizzle:
            spans[s.name] = span
    notes = [f"{name}: {spans[name]}-byte swizzle: the rows wgmma's descriptor reads"
             for name in spans if name in forced]
    if not spans:
        return Skip("; ".join(reasons) or "every TMA stage is swizzled already")
    before = stage_cost(kernel)
    after = stage_cost(kernel, swizzles=spans)
    for name in [n for n in spans if n not in forced]:
        b, a = before.get(name, (0, 0)), after.get(name, (0, 0))
        if a[1] >= b[1]:
            # the XOR costs instructions in every read: only where it saves wavefronts
            reasons.append(f"{name}: a {spans[name]}-byte swizzle would leave its reads' wavefronts at "
                           f"{b[1]} -> {a[1]} (worst conflict {b[0]} -> {a[0]})")
            del spans[name]
        else:
            notes.append(f"{name}: {spans[name]}-byte swizzle: reads' worst bank conflict {b[0]} -> {a[0]}, "
                         f"wavefronts {b[1]} -> {a[1]}")
    if not spans:
        return Skip("; ".join(reasons))

    def swizzle(st):
        if isinstance(st, Stage) and st.name in spans:
            return dataclasses.replace(st, tma=dataclasses.replace(st.tma, swizzle=spans[st.name]))
        return st

    kernel = replace_tile(kernel, Tile(tile.axes, map_body(tile.body, swizzle)))
    return Noted(kernel, tuple(notes + reasons))


PASS = KernelPass("012_swizzle_smem", "tile", DESCRIPTION, apply, KNOBS)
