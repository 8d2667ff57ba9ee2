"""Helpers the scheduling passes share: substitute index variables through a statement
tree, list the variables in use."""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, free_vars, substitute
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.tile_ir import AtomicAdd, Combine, Stage, StridedLoop, Tile, walk


def _sub(e: Affine, mapping, ranges) -> Affine:
    return substitute(e, mapping, ranges)


def substitute_body(body, mapping: dict, ranges: dict):
    """Replace index variables (by Affine expressions) in every index, operand and bound."""
    out = []
    for s in body:
        if isinstance(s, Load):
            s = Load(s.dst, s.tensor, tuple(_sub(e, mapping, ranges) for e in s.index), s.pad)
        elif isinstance(s, Store):
            s = Store(s.tensor, tuple(_sub(e, mapping, ranges) for e in s.index),
                      _sub(s.value, mapping, ranges) if isinstance(s.value, Affine) else s.value)
        elif isinstance(s, AtomicAdd):
            s = AtomicAdd(s.tensor, tuple(_sub(e, mapping, ranges) for e in s.index),
                          _sub(s.value, mapping, ranges) if isinstance(s.value, Affine) else s.value)
        elif isinstance(s, Accumulate) and s.index:
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index))
        elif isinstance(s, Compute):
            s = Compute(s.dst, s.op, tuple(_sub(a, mapping, ranges) if isinstance(a, Affine) else a for a in s.args),
                        s.note)
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
