"""014 pad_smem: pad shared-memory row strides to break bank conflicts.

The conflict. A staged tile is stored row-major, rows of its innermost slab axis. When a
warp walks down a column, lane i reads word i*W + c for the row length W. With W a multiple
of 32 every lane lands in one bank; with W = 16 (a K chunk) lanes alternate between two
banks. The common case is nn.Linear: its weight is [N, K], so the staged weight tile is
16*TN rows (n) of BK = 16 floats (k), and at every k the 16 N-threads of a warp read one
column: 16 distinct words in 2 banks, an 8-way conflict on every B load.

    p_weight_smem[a1r * 16 + a1t, a2i]     row stride 16: degree 8
                                           row stride 17 (pad=1): degree 1
                                           row stride 20 (pad=4): degree 2

The fix. Stage.pad floats are left unused after each row (the materialiser allocates
`rows * (W + pad)` floats and addresses row i at i*(W + pad), for the copy and the loads
alike), so a column's words step W + pad banks and spread out. Every Stage whose loads
conflict (banks.smem_loads: worst warp, every register slot) and for which the knob's pad
lowers the count is padded; others are left alone. Pad 1 removes the conflict entirely but
rows stop being 16-byte aligned, which float4 / 16-byte cp.async copies need; pad 4 keeps
the alignment and leaves a 2-way conflict. The default takes the pad that removes the most
wavefronts, the smaller on a tie; a stage copied by cp.async (013) is only offered pads
that keep its rows whole multiples of 16 bytes (pad 4 for 16-float rows), which those
copies need; a TMA stage is never padded (its box lands unpadded; 012 swizzles it).
"""
from __future__ import annotations

import dataclasses

from ...analysis.banks import stage_cost
from ...ir.tile_ir import Stage, Tile, TileKernel, map_body, walk
from ...ir.tile_mma import FragmentLoad
from ..record import KernelPass, Knob, PassContext, Skip, replace_tile
from ..stage_geometry import block_threads, restamp, restamp_loads, scope_ranges, stage_smem_budget

DESCRIPTION = "pad shared-memory strides to break bank conflicts"
PADS = (0, 1, 4)


def _stages(kernel: TileKernel) -> list[Stage]:
    try:
        body = kernel.tile().body
    except ValueError:
        return []
    seen, out = set(), []
    for s, _ in walk(body):
        if isinstance(s, Stage) and s.name not in seen:
            seen.add(s.name)
            out.append(s)
    return out


def _eligible(stage: Stage, pad: int, ldmatrix: set = frozenset()) -> str | None:
    """Why `pad` (in the stage's elements) may not be given to `stage`, or None. `ldmatrix`:
    the stages a fragment load reads with ldmatrix, whose 16-byte rows must stay aligned."""
    if stage.pad:
        return f"{stage.name}: already padded"
    if len(stage.slab) < 2:
        return f"{stage.name}: one row, nothing to pad"
    if stage.copy == "tma":
        return f"{stage.name}: a TMA box lands unpadded (012 swizzles it instead)"
    if stage.copy == "async" and (stage.slab[-1].extent + elements(stage, pad)) % stage.vector:
        return f"{stage.name}: pad {pad} would break the 16-byte rows its cp.async copies need"
    if stage.name in ldmatrix and (stage.slab[-1].extent + pad) % stage.vector:
        return f"{stage.name}: pad {pad} would break the 16-byte rows ldmatrix reads"
    return None


def _plan(kernel: TileKernel, pad: int):
    """(stage name -> pad, wavefronts saved, reasons) for padding every conflicting stage by `pad`."""
    base = stage_cost(kernel)
    plan, reasons = {}, []
    ldmatrix = {s.stage for s, _ in walk(kernel.tile().body) if isinstance(s, FragmentLoad) and s.via != "lds"}
    for stage in _stages(kernel):
        degree, waves = base.get(stage.name, (1, 0))
        if degree <= 1:
            continue
        why = _eligible(stage, elements(stage, pad), ldmatrix)
        if why:
            reasons.append(why)
            continue
        plan[stage.name] = elements(stage, pad)
    if not plan:
        return plan, 0, reasons
    after = stage_cost(_padded(kernel, plan))
    saved = 0
    for name in list(plan):
        gain = base[name][1] - after[name][1]
        if gain <= 0:
            reasons.append(f"{name}: pad {pad} leaves its {base[name][0]}-way conflict")
            del plan[name]
        else:
            saved += gain
    return plan, saved, reasons


def elements(stage: Stage, pad: int) -> int:
    """The knob's pad (4-byte words) in the stage's elements: a half stage pads 2 per word, so
    16-byte rows stay 16-byte rows."""
    return pad * 4 // stage.element_bytes


def _padded(kernel: TileKernel, plan: dict[str, int]) -> TileKernel:
    """The kernel with the planned pads, its loads restamped: a pad that moves rows off the
    16-byte grid turns a vector loop's shared float4 into lane-by-lane loads, priced so."""
    def pad(s):
        return dataclasses.replace(s, pad=plan[s.name]) if isinstance(s, Stage) and s.name in plan else s
    tile = kernel.tile()
    return restamp_loads(replace_tile(kernel, Tile(tile.axes, map_body(tile.body, pad))))


def _default_pad(kernel: TileKernel, target) -> int:
    best, best_saved = 1, 0
    for pad in (1, 4):
        _, saved, _ = _plan(kernel, pad)
        if saved > best_saved:
            best, best_saved = pad, saved
    return best


KNOBS = (Knob("pad", PADS, _default_pad,
              "4-byte words of padding after each row of a bank-conflicting stage (0: off)"),)


def _smem_floats(stage: Stage, pad: int) -> int:
    n = stage.slab[-1].extent + pad
    for ax in stage.slab[:-1]:
        n *= ax.extent
    return n * stage.buffers


def apply(kernel: TileKernel, pctx: PassContext):
    pad = pctx.knobs["pad"]
    if pad == 0:
        return Skip("padding disabled by the knob (pad=0)")
    stages = _stages(kernel)
    if not stages:
        return Skip("no shared-memory stage")
    plan, saved, reasons = _plan(kernel, pad)
    if not plan:
        return Skip("; ".join(reasons) or "no stage's loads conflict on shared-memory banks")
    total = sum(s.element_bytes * _smem_floats(s, plan.get(s.name, s.pad)) for s in stages)
    if total > stage_smem_budget(pctx.target):
        return Skip(f"padding would need {total} bytes of shared memory, "
                    f"more than {stage_smem_budget(pctx.target)}")

    tile = kernel.tile()
    ranges = {s.name: scope_ranges(tile, loops) for s, loops in walk(tile.body) if isinstance(s, Stage)}

    def pad_stage(s):
        if isinstance(s, Stage) and s.name in plan:
            # a pad of 1 leaves no 16-byte aligned shared row for a cp.async 16: units restamped
            s, _ = restamp(dataclasses.replace(s, pad=plan[s.name]), pctx.types[s.tensor], ranges[s.name],
                           block_threads(tile))
        return s

    new_tile = Tile(tile.axes, map_body(tile.body, pad_stage))
    # a padded stage's loads are restamped too (a pad of 1 moves rows off the 16-byte grid)
    return restamp_loads(replace_tile(kernel, new_tile))


PASS = KernelPass("014_pad_smem", "tile", DESCRIPTION, apply, KNOBS)
