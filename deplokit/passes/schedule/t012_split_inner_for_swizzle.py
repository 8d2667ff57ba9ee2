"""012 split_inner_for_swizzle: split the inner slab axis of a TMA stage into copy atoms.

In a tensor-map TMA copy with 128-byte swizzling the box's inner extent is at most the
swizzle span (128 bytes), so a wider row is split into 128-byte atoms. deplokit's TMA
copies are 1-D bulk copies (cp.async.bulk): they move one contiguous run into contiguous
shared memory and have no swizzle mode; an XOR swizzle of the shared layout would cut each
row into separate 16-byte copies (one mbarrier arrival each) for no gain, since the
stage's loads are already conflict free (or padded by 014). So the pass splits a row only
where a bulk copy needs it: a row that can run past the end of the tensor's last
dimension (the block's last N tile of a matrix whose width is not a multiple of the tile)
would read past the tensor in the middle of one copy. Split into atoms of A floats (the
largest of 32 = 128 bytes, 16, 8, 4 that divides the row, the tensor's width and the
slab's starting column), every atom is wholly inside the tensor or wholly outside it; an
atom outside is clamped onto the last atom inside, whose values only reach outputs that are
never stored.

    w_smem = TmaBufferedStage(w, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1t:16@1), bulk=32x8)
        in2 = load w_smem[a2i, a1t]
  ->                                                         (w is 64 x 40: A = 8 floats)
    w_smem = TmaBufferedStage(w, origin=(a2o * 16, a1b * 16), slab=(a2i:16@0, a1to:2@1, a1ti:8@1), bulk=32x8)
        in2 = load w_smem[a2i, a1t // 8, a1t % 8]

The shared layout is unchanged (row-major, the atoms of a row side by side), so the loads
address the same floats; the materialiser folds (x // A) * A + x % A back into x. 011
already planned the copies in atoms (the stamp bulk=COPIESxFLOATS); the split makes the
slab's axes follow them and restamps the stage (the same runs). Without the split (enable
False) the lowering issues the same atom copies from the unsplit rows.
Other TMA stages are left alone, and the trace says why."""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, FloorDiv, Mod
from ...ir.loop_ir import Load
from ...ir.tile_ir import SlabAxis, Stage, Tile, map_body, walk
from ..stage_geometry import restamp, restamp_loads, rows, scope_ranges
from ..record import KernelPass, PassContext, Skip, flag_knob, replace_tile

DESCRIPTION = "split the inner axis of a TMA stage into copy atoms where a bulk copy needs it"


KNOBS = (flag_knob("enable", "split TMA rows that cross the tensor's end into 128-byte (or smaller) atoms",
                   "row splitting"),)


def apply(kernel, pctx: PassContext):
    tile = kernel.tile()
    stages = [(s, loops) for s, loops in walk(tile.body) if isinstance(s, Stage) and s.copy == "tma"]
    if not stages:
        return Skip("no TMA stage (011 tma_copy did not apply)")
    splits, reasons, ranges = {}, [], {}
    for s, loops in stages:
        shape = pctx.types[s.tensor].shape
        E = s.slab[-1].extent
        ranges[s.name] = scope_ranges(tile, loops)
        r = rows(s, shape, ranges[s.name])
        if len(s.slab) > 1 and s.slab[-2].dim == s.slab[-1].dim:
            reasons.append(f"{s.name}: already split")
        elif not r.crosses_end:
            reasons.append(f"{s.name}: rows of {4 * E} bytes stay inside {s.tensor}; 1-D bulk copies have no "
                           f"swizzle mode, so splitting them would only add copies")
        elif r.wholly >= E:
            reasons.append(f"{s.name}: each row of {4 * E} bytes is wholly inside or outside {s.tensor}")
        elif r.wholly:
            splits[s.name] = r.wholly
        else:
            reasons.append(f"{s.name}: rows cross the end of {s.tensor} off the 16-byte grid")
    if not splits:
        return Skip("; ".join(reasons))

    def rewrite(st):
        if isinstance(st, Stage) and st.name in splits:
            a = splits[st.name]
            last = st.slab[-1]
            slab = st.slab[:-1] + (SlabAxis(f"{last.var}o", last.extent // a, last.dim),
                                   SlabAxis(f"{last.var}i", a, last.dim))
            # the same runs as 011 planned (atoms): the stamp is recomputed from the new slab
            split, _ = restamp(dataclasses.replace(st, slab=slab), pctx.types[st.tensor], ranges[st.name])
            return split
        if isinstance(st, Load) and st.tensor in splits:
            a = splits[st.tensor]
            e = st.index[-1]
            index = st.index[:-1] + (Affine(((FloorDiv(e, a), 1),)), Affine(((Mod(e, a), 1),)))
            return dataclasses.replace(st, index=index)
        return st

    new_tile = Tile(tile.axes, map_body(tile.body, rewrite))
    return restamp_loads(replace_tile(kernel, new_tile))    # the split loads' shared reads too


PASS = KernelPass("012_split_inner_for_swizzle", "tile", DESCRIPTION, apply, KNOBS)
