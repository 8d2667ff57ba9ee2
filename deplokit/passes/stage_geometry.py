"""Where a Stage's slab lies in its global tensor, and which copy units it allows.

Read by the scheduling passes only (and the verifier): they decide how a stage is copied
and stamp it on the stage, which the lowering spells without re-deriving it. Stage.unit
(the threads' copy unit) is stamped by 007 stage_inputs and restamped (`restamp`,
`restamp_stages`) by every pass that changes a stage's origin, slab, pad or copy kind (008,
009, 011, 013, 014); Stage.tma (the tensor-map box, tma_geometry.py) by 011 tma_copy, its
swizzle by 012. `restamp_loads` (called by `restamp_stages` and `rewrite_k_heads`) stamps
each vector loop's load from a stage with whether it is one aligned shared float4
(Load.shared_width): a pass that changes a stage's layout in place (`restamp`: 014) ends
with it, so its loads follow.

A slab is a box: element (c_0, .., c_n-1) of the slab (one coordinate per slab axis) is
element origin[d] + sum(c_k * mult_k for the axes k along d) of the tensor, where mult_k is
1 for the innermost axis along a dimension (an axis split in two steps by the extent of
its inner part). In shared memory the slab is row-major over its axes, each row of the
innermost axis followed by `pad` floats.

The copy moves *units*: 1 float (a scalar copy or a 4-byte cp.async) or 4 floats (float4,
16-byte cp.async); a TMA stage is one tensor-map box instead (tma/tma_geometry.py). A unit
wider than one float needs:

* contiguity: the innermost slab axis runs along the tensor's last dimension;
* alignment: every unit starts at a flat element offset that is a multiple of 4 (16
  bytes) for every value of the block's variables (row stride and origin alike);
* bounds: a unit is wholly inside or wholly outside the tensor (where the slab can
  cross the end of the last dimension, the unit must divide the last extent and the
  origin), so one guard per unit suffices.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ir.index import Affine, bounds, free_vars, var
from ..ir.loop_ir import Load, Loop
from ..ir.stages import (  # noqa: F401  (re-exported)
    buffer_floats,
    dim_multipliers,
    head_length,
    head_stages,
    in_tensor_order,
    max_trips,
    row_major_strides,
    transposed,
)
from ..ir.tile_ir import BLOCK, THREAD, Stage, StridedLoop, Tile, walk
from ..target import VECTOR
from .tma.tma_geometry import swizzle_for, tensor_map_box
from .vector_geometry import load_shared_width, multiples_of_vector

SWIZZLE_SPAN = 32            # floats in a 128-byte swizzle atom


def dim_spans(slab, ndim) -> list[int]:
    """How many elements the slab covers along each tensor dimension."""
    span = [1] * ndim
    for ax in slab:
        span[ax.dim] *= ax.extent
    return span


def _all_multiple(e: Affine, n: int) -> bool:
    return e.const % n == 0 and all(c % n == 0 for _, c in e.terms)


def _hi(e: Affine, ranges) -> int | None:
    b = bounds(e, ranges)
    return None if b is None else b[1]


@dataclass(frozen=True)
class Rows:
    """What the rows (runs of the innermost slab axis) of a stage allow."""
    contiguous: bool          # the innermost axis runs along the tensor's last dim, step 1
    aligned: bool             # every row starts 16-byte aligned and is a multiple of 16 bytes long
    crosses_end: bool         # a row may run past the end of the tensor's last dimension
    wholly: int               # largest unit (of 32/16/8/4 floats) that is wholly in or out of bounds, else 0
    clamp_ok: bool            # rows past an outer dimension's end can be clamped keeping alignment
    reason: str               # why the rows do not allow 16-byte units ('' when they do)
    per16: int = VECTOR       # elements in 16 bytes (4 floats, 8 halves)

    @property
    def vector(self) -> bool:
        """16-byte units (float4 / cp.async 16) are possible."""
        return self.contiguous and self.aligned and self.clamp_ok and \
            (not self.crosses_end or self.wholly >= self.per16)


def rows(stage, shape, ranges) -> Rows:
    slab, origin = stage.slab, stage.origin
    vec = getattr(stage, "vector", VECTOR)      # elements per 16 bytes of what the stage holds
    size = 16 // vec
    D = len(shape) - 1
    last = slab[-1]
    if D < 0 or last.dim != D:
        return Rows(False, False, False, 0, False,
                    f"the innermost slab axis {last.var} runs along dim {last.dim}, not along the tensor's "
                    f"contiguous last dimension: rows are not contiguous in global memory", vec)
    E = last.extent
    strides = row_major_strides(shape)
    mult = dim_multipliers(slab)
    # flat offset of a row's first element, as an affine form over the block's variables
    # and the (symbolic) coordinates of the outer slab axes
    start = Affine()
    for d, o in enumerate(origin):
        start = start + o * strides[d]
    for k, ax in enumerate(slab[:-1]):
        start = start + var(f"_c{k}") * (mult[k] * strides[ax.dim])
    span = dim_spans(slab, len(shape))
    hi_last = _hi(origin[D], ranges)
    crosses = hi_last is None or hi_last + span[D] > shape[D]
    wholly = 0
    for a in sorted({SWIZZLE_SPAN, 16, 8, vec}, reverse=True):
        if E % a == 0 and shape[D] % a == 0 and _all_multiple(origin[D], a):
            wholly = a
            break
    clamp_ok = True
    for d in range(D):
        hi = _hi(origin[d], ranges)
        if (hi is None or hi + span[d] > shape[d]) and strides[d] % vec:
            clamp_ok = False
    aligned = E % vec == 0 and _all_multiple(start, vec)
    reason = ""
    if E % vec:
        reason = f"slab rows of {E} {_unit_name(size)} ({size * E} bytes) are not a multiple of 16 bytes"
    elif not aligned:
        varying = any(d in {ax.dim for ax in slab[:-1]} or not origin[d].is_const for d in range(D))
        if varying and any(strides[d] % vec for d in range(D)):
            reason = (f"the row stride of {stage.tensor} is {shape[D]} {_unit_name(size)} "
                      f"({size * shape[D]} bytes): rows are not 16-byte aligned")
        else:
            reason = f"the slab starts at column {origin[D]} of {stage.tensor}: rows are not 16-byte aligned"
    elif not clamp_ok:
        reason = "rows past the tensor's end cannot be clamped to an aligned row"
    elif crosses and wholly < vec:
        reason = (f"rows may run past the end of {stage.tensor}'s last dimension ({shape[D]} "
                  f"{_unit_name(size)}) in the middle of a 16-byte unit")
    return Rows(True, aligned, crosses, wholly, clamp_ok, reason, vec)


def _unit_name(size: int) -> str:
    return "floats" if size == 4 else "halves"


def copy_unit(stage, ttype, ranges, threads: int = 0) -> int:
    """Floats per unit the block's threads copy the stage in (Stage.unit): VECTOR (a float4,
    or a 16-byte cp.async, which also needs 16-byte aligned padded shared rows) where the
    rows allow it, else 1. A TMA stage's unit is the one of its cp.async fallback. A prologue
    stage (math per element) whose float4 units would leave some of the block's `threads`
    idle copies single floats: every thread computes a share, and none holds 4 elements'
    worth of transcendentals at once (a 16 x 16 silu(gate) * up slab on 128 threads: float4
    on 64 of them made ptxas spill on sm_120)."""
    if stage.prologue is not None and threads and _elements(stage) // VECTOR < threads:
        return 1
    if transposed(stage):
        # 007's k-major A: cp.async moves each float by itself; the threads read float4
        # along the tensor's rows and store them down the stage's columns
        if stage.copy != "sync" or ttype.dtype != "float32":
            return 1
        return VECTOR if rows(in_tensor_order(stage), ttype.shape, ranges).vector else 1
    if stage.dtype != "float32":
        # a half stage holds the tensor's bytes: 16-byte cp.async units of 8 halves; its sync
        # copies move one element at a time
        if stage.dtype != ttype.dtype or stage.copy != "async" or not rows(stage, ttype.shape, ranges).vector \
                or (stage.slab[-1].extent + stage.pad) % stage.vector:
            return 1
        return stage.vector
    if ttype.dtype != "float32" or not rows(stage, ttype.shape, ranges).vector:
        return 1
    if stage.copy != "sync" and (stage.slab[-1].extent + stage.pad) % VECTOR:
        return 1
    return VECTOR


def _elements(stage) -> int:
    n = 1
    for ax in stage.slab:
        n *= ax.extent
    return n


def block_threads(tile: Tile) -> int:
    """Threads of a Tile's block (its THREAD axes)."""
    n = 1
    for a in tile.axes:
        if a.kind == THREAD:
            n *= a.extent
    return n


def restamp(stage, ttype, ranges, threads: int = 0):
    """(stage, why): the stage with its copy stamps recomputed after a pass changed its
    slab, origin, pad or copy kind: its copy unit, and a TMA stage's box (its swizzle kept
    where the box still allows it); where the stage is no tensor-map box any more, it falls
    back to cp.async, and why says so."""
    why = ""
    if stage.copy == "tma":
        box, why = tensor_map_box(stage, ttype.shape, ttype.dtype)
        if why:
            stage, why = dataclasses.replace(stage, copy="async", tma=None), f"{stage.name}: cp.async, not TMA: {why}"
        else:
            keep = stage.tma.swizzle if stage.tma and swizzle_for(box)[0] == stage.tma.swizzle else 0
            stage = dataclasses.replace(stage, tma=dataclasses.replace(box, swizzle=keep))
    return dataclasses.replace(stage, unit=copy_unit(stage, ttype, ranges, threads)), why


def restamp_stages(kernel, types):
    """The kernel with every Stage's copy unit (and TMA plan) recomputed in its scope, and
    its loads from stages restamped (restamp_loads)."""
    return restamp_loads(dataclasses.replace(kernel, body=_restamp_body(kernel.body, types, {}, 0)))


def _restamp_body(body, types, ranges, threads):
    out = []
    for s in body:
        if isinstance(s, Stage):
            s, _ = restamp(s, types[s.tensor], ranges, threads)
        elif isinstance(s, (Loop, StridedLoop, Tile)):
            inner = dict(ranges)
            if isinstance(s, Tile):
                inner.update((a.var, a.extent) for a in s.axes)
                threads = block_threads(s)
            else:
                inner[s.var] = s.extent if isinstance(s, Loop) else s.stop
            s = dataclasses.replace(s, body=_restamp_body(s.body, types, inner, threads))
        out.append(s)
    return tuple(out)


def restamp_loads(kernel):
    """The kernel with every load a vector loop (or a register loop's quads) makes from a
    stage stamped with whether its 4 lanes (slots) read one aligned shared float4
    (Load.shared_width, vector_geometry.load_shared_width), which the stage's slab, pad and
    buffers decide; every other load 1."""
    multiples = multiples_of_vector(kernel.body)
    return dataclasses.replace(kernel, body=_restamp_loads(kernel.body, {}, None, multiples))


def _restamp_loads(body, stages, loop, multiples):
    out, stages = [], dict(stages)
    for s in body:
        if isinstance(s, Stage):
            stages[s.name] = s
        elif isinstance(s, Load) and (s.tensor in stages or s.shared_width != 1):
            width = load_shared_width(s, stages[s.tensor], loop, multiples) if s.tensor in stages else 1
            s = dataclasses.replace(s, shared_width=width)
        elif isinstance(s, (Loop, StridedLoop, Tile)):
            s = dataclasses.replace(s, body=_restamp_loads(s.body, stages, s if isinstance(s, Loop) else None,
                                                           multiples))
        out.append(s)
    return tuple(out)


def scope_ranges(tile: Tile, loops) -> dict[str, int]:
    """Variable -> extent for the tile's axes and the given enclosing loops."""
    out = {a.var: a.extent for a in tile.axes}
    for lp in loops:
        if isinstance(lp, Loop):
            out[lp.var] = lp.extent
        elif isinstance(lp, StridedLoop):
            out[lp.var] = lp.stop
    return out


def k_outer_loops(tile: Tile, flash: bool = False):
    """The matmul K-outer loops at the top of the tile (a K loop holding a K loop), with the
    Stages at the head of their body; with `flash`, flash attention's key-tile loop (serial:
    from tile 0, or, causal, a StridedLoop of step 1 from the block's diagonal tile, whose
    start is an index of the block: its ring numbers iterations from that start)."""
    blocks = {a.var for a in tile.axes if a.kind == BLOCK}
    out = []
    for s in tile.body:
        if isinstance(s, Loop) and s.role == "K" and any(isinstance(c, Loop) and c.role == "K" for c in s.body):
            out.append(s)
        elif flash and isinstance(s, Loop) and s.kind == "serial" and s.stop is None:   # no ring past a runtime stop
            out.append(s)
        elif flash and isinstance(s, StridedLoop) and s.kind == "serial" and s.step == 1 and \
                free_vars(s.start) <= blocks:
            out.append(s)
    return out


def trips(tile: Tile, loop) -> int:
    """The most iterations a K loop runs in any block of the tile."""
    return max_trips(loop, {a.var: a.extent for a in tile.axes})


def stage_smem_budget(target) -> int:
    """Bytes of shared memory a kernel's stages may take: the target's dynamic shared memory
    per block (a kernel above the 48 KiB a block declares statically carves its arrays from
    dynamic shared memory: passes/lower/dynamic_smem.py), less 1 KiB for its mbarriers and
    other small arrays."""
    return target.dynamic_smem_per_block - 1024


def smem_bytes(tile: Tile) -> int:
    """Bytes of shared memory the tile's stages declare (padded rows, every buffer)."""
    total = 0
    for s, _ in walk(tile.body):
        if isinstance(s, Stage):
            total += s.element_bytes * buffer_floats(s) * s.buffers
    return total


def rewrite_k_heads(kernel, fn):
    """The kernel with fn(stage, loop) -> Stage applied to every Stage at the head of a
    top-level K-outer loop (an AsyncWait among them is kept as it is)."""
    tile = kernel.tile()
    heads = {id(lp): lp for lp in k_outer_loops(tile, getattr(kernel, "flash", None) is not None)}
    body = []
    for s in tile.body:
        if id(s) in heads:
            n = head_length(s)
            new = tuple(fn(st, s) if isinstance(st, Stage) else st for st in s.body[:n]) + s.body[n:]
            s = dataclasses.replace(s, body=new)
        body.append(s)
    new_tile = Tile(tile.axes, tuple(body))
    # a stage's buffers decide where its second buffer starts: its loads are restamped
    return restamp_loads(dataclasses.replace(kernel, body=tuple(new_tile if isinstance(s, Tile) else s
                                                                for s in kernel.body)))
