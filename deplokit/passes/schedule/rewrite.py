"""Helpers the scheduling passes share: substitute index variables through a statement
tree, list the variables in use, wait for the stages a pass made asynchronous."""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, free_vars, substitute
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.tile_ir import AsyncWait, AtomicAdd, Stage, StridedLoop, Tile, walk


def _sub(e: Affine, mapping, ranges) -> Affine:
    return substitute(e, mapping, ranges)


def substitute_body(body, mapping: dict, ranges: dict):
    """Replace index variables (by Affine expressions) in every index, operand and bound."""
    out = []
    for s in body:
        if isinstance(s, Load):
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index))
        elif isinstance(s, Store):
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index),
                                    value=_sub(s.value, mapping, ranges) if isinstance(s.value, Affine) else s.value)
        elif isinstance(s, AtomicAdd):
            s = AtomicAdd(s.tensor, tuple(_sub(e, mapping, ranges) for e in s.index),
                          _sub(s.value, mapping, ranges) if isinstance(s.value, Affine) else s.value)
        elif isinstance(s, Accumulate) and s.index:
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index))
        elif isinstance(s, Compute):
            s = dataclasses.replace(s, args=tuple(_sub(a, mapping, ranges) if isinstance(a, Affine) else a
                                                  for a in s.args))
        elif isinstance(s, Loop):
            s = Loop(s.var, s.extent, s.kind, substitute_body(s.body, mapping, ranges), s.role, s.unroll)
        elif isinstance(s, StridedLoop):
            s = StridedLoop(s.var, _sub(s.start, mapping, ranges), s.stop, s.step, s.kind,
                            substitute_body(s.body, mapping, ranges), s.role, s.unroll)
        elif isinstance(s, Tile):
            s = Tile(s.axes, substitute_body(s.body, mapping, ranges))
        elif isinstance(s, Stage):
            s = dataclasses.replace(s, origin=tuple(_sub(e, mapping, ranges) for e in s.origin))
        out.append(s)
    return tuple(out)


def used_vars(body) -> set[str]:
    names: set[str] = set()
    for s, _ in walk(body):
        if isinstance(s, (Loop, StridedLoop)):
            names.add(s.var)
        elif isinstance(s, Tile):
            names |= {a.var for a in s.axes}
        if isinstance(s, (Load, Store, AtomicAdd)):
            for e in s.index:
                names |= free_vars(e)
        if isinstance(s, Stage):
            names |= {a.var for a in s.slab}
    return names


def await_copies(body, names):
    """The body with an AsyncWait right after every group of consecutive Stages (of one body,
    at any depth) holding a stage named in `names`: it lists the group's asynchronous
    stages, in their order. An AsyncWait already right after the group (011 put it there
    for the group's TMA stages, 013 then narrows the others) is widened, not repeated."""
    out = []
    i = 0
    while i < len(body):
        s = body[i]
        if isinstance(s, Stage):
            j = i
            while j < len(body) and isinstance(body[j], Stage):
                j += 1
            group = body[i:j]
            out.extend(group)
            old = body[j] if j < len(body) and isinstance(body[j], AsyncWait) else None
            if any(g.name in names for g in group):
                listed = tuple(g.name for g in group if g.copy != "sync")
                listed += tuple(n for n in (old.stages if old else ()) if n not in listed)
                out.append(AsyncWait(listed))
                if old is not None:
                    j += 1
            i = j
            continue
        if isinstance(s, (Tile, Loop, StridedLoop)):
            s = dataclasses.replace(s, body=await_copies(s.body, names))
        out.append(s)
        i += 1
    return tuple(out)
