"""A helper the scheduling passes share: wait for the stages a pass made asynchronous.
(Listing the variables in use is ir/tile_ir.py's used_vars; substituting index variables
is a plain IR rewrite: ir/substitute.py.)"""
from __future__ import annotations

import dataclasses

from ...ir.loop_ir import Loop
from ...ir.tile_ir import AsyncWait, Stage, StridedLoop, Tile


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
