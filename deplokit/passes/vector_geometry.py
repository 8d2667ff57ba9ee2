"""Which accesses of a vector loop may be one 128-bit (float4) access, and why not.

A vector loop (`for a1v in 0..4:  # vector`, made by 005 blockify_launch) runs its body for
4 consecutive elements of the contiguous innermost axis in one thread. A load or store of
the body is one float4 when, for the loop's 4 values, it touches 4 consecutive floats that
start at a 16-byte aligned flat offset:

* unit stride: the vector variable appears only in the tensor's last index component, with
  coefficient 1 and not inside a `//`, `%` or gather;
* alignment: what the rest of that component adds is a multiple of 4 (its constant and every
  coefficient, or a loop variable known to step by multiples of 4), and so is every row
  stride: the tensor's last extent is a multiple of 4;
* bounds: with the last extent and the offset both multiples of 4, the 4 elements are
  wholly inside or wholly outside the tensor, so one guard (on the first) covers them;
* dtype: float32 (float4 moves floats) or a half type (4 halves, one 8-byte access; the
  alignment and bounds above are in elements, so they hold for halves as they are).

Used by 005 blockify_launch, which vectorises a loop only when every global access of it
qualifies (otherwise it records why) and stamps each access's width on it (Load.width,
Store.width: 4 = one float4), and by the IR verifier, which checks that a stamped width still
holds after the passes that follow. The lowering reads the stamp.

A load from a staged slab (007) reads shared memory: it is one float4 when the 4 floats
are consecutive and 16-byte aligned in the slab's shared layout (`shared_width`: unit
stride along the innermost slab axis, an offset that is a multiple of 4, each outer index
component a multiple of 4 wherever its padded row stride is not, a double buffer's size a
multiple of 4). stage_geometry.restamp_stages stamps it on
the load (Load.shared_width) whenever it stamps the stage's copy, so it follows the stage's
slab and pad through 007..014; the verifier checks it.
"""
from __future__ import annotations

import dataclasses

from ..ir.index import Affine, Var, free_vars, substitute, var
from ..ir.lanes import is_multiple, multiples_of, row_major_offset, split_lane, varies
from ..ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ..ir.stages import buffer_floats, shared_strides
from ..target import VECTOR

# 4 elements of these move as one access: float32 a float4 (16 bytes), a half type 8 bytes
VECTOR_DTYPES = ("float32", "bfloat16", "float16")


def multiples_of_vector(body) -> frozenset[str]:
    """Loop variables of `body` that only take multiples of 4 (ir.lanes.multiples_of)."""
    return multiples_of(body, VECTOR)


def float4_reason(tensor: str, index, lane: str, ttype, multiples=frozenset()) -> str:
    """'' when tensor[index] over the 4 values of `lane` is one aligned float4, else why not."""
    where = f"{tensor}[{', '.join(str(e) for e in index)}]"
    if ttype.dtype not in VECTOR_DTYPES:
        return f"{where}: {ttype.dtype} elements, float4 moves float32 (and 8 bytes 4 halves)"
    if not index:
        return f"{where}: a scalar"
    for d, e in enumerate(index[:-1]):
        if lane in free_vars(e):
            # an axis split and merged back (x[a // 64, a % 64] of a (9, 64) tensor: a decode
            # step's attention row read by the o projection) is a unit stride in the flat
            # row-major offset: judged there, as one row of all the elements
            flat = row_major_offset(index, ttype.shape)
            if (split_lane(flat, lane) or (0,))[0] == 1:
                return float4_reason(tensor, (flat,), lane, dataclasses.replace(ttype, shape=(ttype.numel,)),
                                     multiples)
            return f"{where}: {lane} indexes dimension {d}, not the contiguous last one"
    parts = split_lane(index[-1], lane)
    if parts is None or parts[0] != 1:
        return f"{where}: not unit stride along {lane}"
    if not is_multiple(parts[1], VECTOR, multiples):
        return f"{where}: offset {parts[1]} is not a multiple of {VECTOR} floats (16 bytes)"
    if ttype.shape[-1] % VECTOR:
        return (f"{where}: last dimension of {ttype.shape[-1]} is not a multiple of {VECTOR}: "
                f"rows are not 16-byte aligned")
    return ""


def stamp_widths(loop, types, multiples=frozenset()):
    """The vector loop `loop` with every global access that is one aligned float4 over its 4
    lanes stamped width 4 (the others stay 1: spelled lane by lane)."""
    def stamp(s):
        if isinstance(s, (Load, Store)) and s.tensor in types and varies(s.index, loop.var) and \
                not float4_reason(s.tensor, s.index, loop.var, types[s.tensor], multiples):
            return dataclasses.replace(s, width=VECTOR)
        return s
    return dataclasses.replace(loop, body=tuple(stamp(s) for s in loop.body))


def body_reason(body, lane: str, types, multiples=frozenset()) -> str:
    """'' when every global access of `body` (a vector loop's body, with `lane` its variable)
    is one float4 or does not depend on the lane; else the first reason why not."""
    for s in body:
        if isinstance(s, (Load, Store)) and s.tensor not in types:
            # a kernel-local row (attention's row fusion) lives in shared memory, not global
            return f"{s.tensor} is a kernel-local row on chip, not a global tensor"
        if isinstance(s, Load):
            if not varies(s.index, lane):
                continue
            why = float4_reason(s.tensor, s.index, lane, types[s.tensor], multiples)
        elif isinstance(s, Store):
            if not varies(s.index, lane):
                return f"{s.tensor}[{', '.join(str(e) for e in s.index)}]: every lane stores the same element"
            why = float4_reason(s.tensor, s.index, lane, types[s.tensor], multiples)
        elif isinstance(s, Compute) or (isinstance(s, Accumulate) and not s.index):
            continue
        else:
            return f"a {type(s).__name__} in the loop body (only loads, computes, stores and accumulates vectorise)"
        if why:
            return why
    return ""


def load_shared_width(load, stage, loop, multiples=frozenset()) -> int:
    """Load.shared_width of `load`, a load from `stage` right inside `loop` (or None): VECTOR
    where the 4 lanes of a vector loop, or 4 slots of a register loop (008's quads), read one
    16-byte aligned float4 of the slab, else 1."""
    if loop is None or loop.kind not in ("vector", "register") or loop.extent % VECTOR:
        return 1
    if loop.kind == "vector":
        return shared_width(load, stage, loop.var, multiples) if loop.extent == VECTOR else 1
    if not _plain(loop.body):
        return 1             # the lowering splits the slots (r = 4q + v) in loads, computes, stores only
    return register_quad_width(load, stage, loop)


def _plain(body) -> bool:
    return all(isinstance(s, (Load, Compute, Accumulate, Store)) or
               (isinstance(s, Loop) and s.kind != "vector" and _plain(s.body)) for s in body)


def register_quad_width(load, stage, loop) -> int:
    """VECTOR when slots 4q .. 4q+3 of register loop `loop` read 4 adjacent floats of the
    slab, the first 16-byte aligned in every buffer, else 1."""
    if len(load.index) != len(stage.slab):
        return 1
    r, q, v = loop.var, f"{loop.var}q", f"{loop.var}v"
    ranges = {q: loop.extent // VECTOR, v: VECTOR}
    word = Affine()
    for e, stride in zip(load.index, shared_strides(stage)):
        word = word + e * stride
    first = substitute(word, {r: var(q) * VECTOR}, ranges)
    step = substitute(word, {r: var(q) * VECTOR + var(v)}, ranges) - first
    if step.const or step.terms != ((Var(v), 1),):
        return 1
    if stage.buffers >= 2 and buffer_floats(stage) % VECTOR:
        return 1
    return VECTOR if first.const % VECTOR == 0 and all(c % VECTOR == 0 for _, c in first.terms) else 1


def shared_width(load, stage, lane: str, multiples=frozenset()) -> int:
    """VECTOR when `load` (in the vector loop over `lane`) reads one 16-byte aligned float4
    of `stage`'s shared slab over its 4 lanes, else 1 (spelled lane by lane)."""
    index, slab = load.index, stage.slab
    if not varies(index, lane) or len(index) != len(slab) or len({ax.dim for ax in slab}) != len(slab):
        return 1             # a slab split by 012 (two axes along one dimension) is read lane by lane
    if any(lane in free_vars(e) for e in index[:-1]):
        return 1
    parts = split_lane(index[-1], lane)
    if parts is None or parts[0] != 1 or not is_multiple(parts[1], VECTOR, multiples):
        return 1
    for e, stride in zip(index[:-1], shared_strides(stage)[:-1]):
        if stride % VECTOR and not is_multiple(e, VECTOR, multiples):
            return 1
    if stage.buffers >= 2 and buffer_floats(stage) % VECTOR:
        return 1             # buffer b starts at b * buffer_floats: off the 16-byte grid
    return VECTOR
