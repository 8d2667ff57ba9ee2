"""011 tma_copy: narrow eligible BufferedStages to TmaBufferedStage (sm_90+).

A TMA stage is filled by one tensor-map copy (cp.async.bulk.tensor, the tensor memory
accelerator's tiled form): one elected thread issues one instruction per stage per K
iteration, the TMA unit moves the whole box without any thread's registers, and the copy
completes on an mbarrier the block waits on. The kernel receives a tensor map (a
CUtensorMap the host encodes: the tensor's dims and strides, the box, the swizzle) per
staged operand. A stage is eligible when

  * it is buffered (a ring of 2 to 4) at the head of a K-outer loop (010), or of flash
    attention's key-tile loop (its K and V tiles: flash_stage.py),
  * the tensor is float32 with at most 5 dimensions, and the slab is a box of it: one
    slab axis per tensor dimension, in the tensor's order, rows not padded,
  * the tensor's rows are a multiple of 16 bytes apart, the box's inner row a multiple of
    16 bytes, each box extent at most 256 (passes/tma/tma_geometry.py).

Where the slab crosses the tensor's end (odd M, N or K tails) the copy reads zeros, so
stages whose rows would end in the middle of a 16-byte unit are eligible as long as the
tensor's row stride is aligned.

The copies are asynchronous: the pass puts an AsyncWait naming the stages it narrowed right
after their group at the head of the K loop (the point where the mbarrier wait lets every
thread read them; 013 widens it with the group's cp.async stages, 015 moves it before the
stages when it pipelines the loop). The box is stamped on the stage (Stage.tma, printed
tmap=BOXxBOX); 012 adds the swizzle it is written in.

    for a2o in 0..4:  # reduce (K)
        x_smem = BufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1))
        for a2i in 0..16:  # reduce (K)
  ->
    for a2o in 0..4:  # reduce (K)
        x_smem = TmaBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1), tmap=16x16)
        AsyncWait(x_smem)
        for a2i in 0..16:  # reduce (K)
"""
from __future__ import annotations

import dataclasses

from ...ir.tile_ir import Tile
from ..flash.flash_stage import flash_tma_notes, flash_tma_skip
from ..record import Knob, Needs, Noted, PassContext, Skip, replace_tile
from ..repack.repack import RepackingPass, plan_repack, with_workspaces
from ..stage_geometry import head_stages, k_outer_loops, restamp_stages, rewrite_k_heads
from ..tma.tma_geometry import tensor_map_box
from .rewrite import await_copies
from .t001_tileify import PASS as P001
from .t002_chunk_matmul_k import PASS as P002
from .t003_split_matmul_k import PASS as P003
from .t004_cooperative_reduce import PASS as P004
from .t005_blockify_launch import PASS as P005
from .t006_chunk_reduce import PASS as P006
from .t007_stage_inputs import PASS as P007
from .t008_register_tile import PASS as P008
from .t009_permute_register_tile import PASS as P009
from .t010_double_buffer import PASS as P010

DESCRIPTION = "narrow eligible BufferedStages to TMA tensor-map copies (sm_90+)"


MIN_TMA_BLOCK = 32    # outputs per thread of the main loop's register block


def _default_enable(kernel, target) -> bool:
    """TMA where the register block is at least 4 x 8. The producer is one lane warp 0
    elects: its empty-slot wait, arrive.expect_tx and one UTMALDG per operand cost that warp
    30 to 37 issue slots per K step (sm_90 SASS), shared by the block's warps, while no other
    warp issues a copy. A warp's issue slots per K step (benchmarks/bench_matmul.py, slots/K)
    against cp.async: 4 x 8 598 vs 608, 8 x 4 597 vs 596, 8 x 8 keeps 0.91 of them for FFMA,
    each with one copy per operand per K step (cp.async: up to 5). A 4 x 4 block breaks even
    (325 vs 328 with 128 threads, 319 vs 318 with 256) and cp.async copies it with 2 or 3
    instructions per K step already: it stays on cp.async, which every thread issues for its
    own share. The tuner may still choose TMA there. Flash attention's K/V tiles always
    (flash_stage.flash_tma_notes says why)."""
    if getattr(kernel, "flash", None) is not None or _wgmma(kernel):
        return True
    return _small_block(kernel) is None


def _wgmma(kernel) -> bool:
    """008 chose wgmma: its operands must be TMA boxes (the descriptors read them swizzled)."""
    mma = getattr(kernel, "mma", None)
    return mma is not None and bool(mma.wgmma)


def _small_block(kernel) -> int | None:
    """The main loop's register block (outputs per thread) when it is under MIN_TMA_BLOCK."""
    block = max((r.size for r in kernel.register_tiles), default=None)
    return block if block is not None and block < MIN_TMA_BLOCK else None


KNOBS = (Knob("enable", (True, False), _default_enable,
              "copy eligible BufferedStages with one TMA tensor-map copy each",
              searched=lambda k, t: (True,) if _wgmma(k) else (True, False)),
         Knob("repack", ("auto", True, False), lambda kernel, target: "auto",
              "stage an operand whose rows are not 16 bytes apart from a padded copy (repack/repack.py): "
              "auto (where it pays), always, never"))


def apply(kernel, pctx: PassContext):
    if not pctx.knobs["enable"]:
        block = _small_block(kernel)
        if block is None or getattr(kernel, "flash", None) is not None or _wgmma(kernel):
            return Skip("TMA copies disabled by the knob")
        return Skip(f"a register block of {block} outputs per thread (< {MIN_TMA_BLOCK}) is too small to hide "
                    f"the TMA producer's ~35 issue slots per K step: cp.async (enable=True forces TMA)")
    tile = kernel.tile()
    loops = k_outer_loops(tile, kernel.flash is not None)
    candidates = [s for lp in loops for s in head_stages(lp) if s.buffers >= 2 and s.copy == "sync"]
    if not candidates:
        return Skip(flash_tma_skip(kernel) or
                    "no BufferedStage at the head of a K-outer loop (010 double_buffer did not apply)")
    reasons, chosen, repacks, notes = [], {}, {}, []
    for s in candidates:
        if s.prologue is not None:   # a tensor-map copy moves bytes as they are
            reasons.append(f"{s.name}: its prologue is applied between load and store: a copy through registers")
            continue
        t = pctx.types[s.tensor]
        if s.element_bytes == 2 and not _wgmma(kernel):
            reasons.append(f"{s.name}: mma.sync's half slabs stay on cp.async (ldmatrix of a TMA box not modelled)")
            continue
        box, why = tensor_map_box(s, t.shape, t.dtype)
        if why:     # rows no tensor map takes: from a 16-byte pitched copy, where it pays
            repack, box, note = plan_repack(kernel, s, t, pctx)
            repacks.update({s.name: repack} if repack else {})
            notes += [note] if repack else []
            why = "" if repack else "; ".join(filter(None, (why, note)))
        if why:
            reasons.append(f"{s.name}: {why}")
        else:
            chosen[s.name] = box
    if not chosen:
        return Skip("; ".join(reasons))
    kernel = rewrite_k_heads(kernel, lambda s, lp: dataclasses.replace(
        s, copy="tma", tma=chosen[s.name], tensor=repacks[s.name].workspace if s.name in repacks else s.tensor)
        if s.name in chosen else s)
    tile = kernel.tile()
    new_tile = Tile(tile.axes, await_copies(tile.body, chosen))
    kernel = dataclasses.replace(replace_tile(kernel, new_tile), repacks=tuple(dict.fromkeys(repacks.values())))
    # a TMA stage's thread copy unit is its cp.async fallback's (16-byte aligned shared rows)
    kernel = restamp_stages(kernel, with_workspaces(pctx.types, kernel))
    # the stages left to cp.async, and why; the operands repacked
    notes += list(flash_tma_notes(kernel, chosen)) + [f"{r} (cp.async instead)" for r in reasons]
    return Noted(kernel, tuple(notes)) if notes else kernel


PASS = RepackingPass("011_tma_copy", "tile", DESCRIPTION, apply, KNOBS,
                     needs=(Needs("tma", "TMA (bulk copies need sm_90)"),), flash_aware=True,
                     early=(P001, P002, P003, P004, P005, P006, P007, P008, P009, P010))
