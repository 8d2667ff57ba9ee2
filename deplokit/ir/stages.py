"""Where a Stage's elements lie, and which stages head a loop: the plain facts about
Tile-IR stages that the scheduling passes (stage_geometry), the lowering and the analyses
all read. No decision is made here: how a stage is copied is stamped on it by the schedule
(Stage.unit, Stage.tma), and how a vector loop reads it on its loads (Load.shared_width)."""
from __future__ import annotations

import dataclasses

from .index import Affine, bounds
from .tile_ir import AsyncWait, Stage, StridedLoop


def dim_multipliers(slab) -> tuple[int, ...]:
    """Per slab axis, its step along its tensor dimension (1 for the innermost axis along a
    dimension; an axis split by 012 steps by the extent of its inner part)."""
    mult = [1] * len(slab)
    seen: dict[int, int] = {}
    for k in reversed(range(len(slab))):
        d = slab[k].dim
        mult[k] = seen.get(d, 1)
        seen[d] = mult[k] * slab[k].extent
    return tuple(mult)


def global_index(stage, index) -> tuple[Affine, ...]:
    """The tensor element a load of `stage` at slab position `index` reads: its origin plus
    each slab axis's position along its dimension (dim_multipliers)."""
    out = list(stage.origin)
    for k, (ax, m) in enumerate(zip(stage.slab, dim_multipliers(stage.slab))):
        out[ax.dim] = out[ax.dim] + index[k] * m
    return tuple(out)


def row_major_strides(shape) -> tuple[int, ...]:
    """Elements between neighbours along each dimension of a row-major array."""
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def transposed(stage) -> bool:
    """The slab's axes run in another order than the tensor's dimensions (007's k-major A):
    a row of the stage is not a row of the tensor."""
    return any(a.dim > b.dim for a, b in zip(stage.slab, stage.slab[1:]))


def in_tensor_order(stage):
    """The stage with its slab axes in the order of the tensor's dimensions (and no pad):
    the box a transposed stage's copy reads, row by row of the tensor."""
    order = sorted(range(len(stage.slab)), key=lambda k: stage.slab[k].dim)
    return dataclasses.replace(stage, slab=tuple(stage.slab[k] for k in order), pad=0)


def shared_strides(stage) -> tuple[int, ...]:
    """Floats between neighbours along each slab axis in the stage's shared buffer: row-major
    over the slab axes, each row of the innermost axis followed by Stage.pad floats."""
    shape = [ax.extent for ax in stage.slab]
    shape[-1] += stage.pad
    return row_major_strides(shape)


def buffer_floats(stage) -> int:
    """Floats one buffer of the stage takes in shared memory (its rows padded)."""
    n = stage.slab[-1].extent + stage.pad
    for ax in stage.slab[:-1]:
        n *= ax.extent
    return n


def head_stages(loop) -> tuple:
    """The Stages at the head of the loop's body, before its first other statement; the
    AsyncWait among them (after them, or before them once 015 pipelined the loop) is passed
    over."""
    out = []
    for s in loop.body:
        if isinstance(s, AsyncWait):
            continue
        if not isinstance(s, Stage):
            break
        out.append(s)
    return tuple(out)


def head_length(loop) -> int:
    """How many statements the head of the loop's body holds: its Stages and AsyncWaits."""
    n = 0
    while n < len(loop.body) and isinstance(loop.body[n], (Stage, AsyncWait)):
        n += 1
    return n


def loop_start(loop) -> Affine:
    """Where a ring's K loop starts: 0 for a Loop, an index of the block for a StridedLoop
    (flash attention's causal key loop starts at the block's diagonal tile). Its step is 1
    (stage_geometry.k_outer_loops), so its iteration j = var - start numbers the ring's tiles from 0."""
    return loop.start if isinstance(loop, StridedLoop) else Affine()


def loop_stop(loop) -> int:
    return loop.stop if isinstance(loop, StridedLoop) else loop.extent


def max_trips(loop, ranges) -> int:
    """The most iterations the loop runs in any block (`ranges`: the block's variables)."""
    if not isinstance(loop, StridedLoop):
        return loop.extent
    b = bounds(loop.start, ranges)
    low = b[0] if b is not None else 0
    return max(0, -(-(loop.stop - low) // loop.step))

