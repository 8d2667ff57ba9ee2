"""Substituting index variables through a Loop/Tile-IR statement tree: a plain rewrite of
the IR that the scheduling passes and the lowering both use (it decides nothing)."""
from __future__ import annotations

import dataclasses

from .index import Affine, substitute
from .loop_ir import Accumulate, Compute, Load, Loop, Store
from .tile_ir import Stage, StridedLoop, Tile
from .tile_mma import FragmentLoad, MmaSync, WarpgroupMma


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
        elif isinstance(s, FragmentLoad):
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index),
                                    at=tuple(_sub(e, mapping, ranges) for e in s.at))
        elif isinstance(s, MmaSync):
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index),
                                    a_index=tuple(_sub(e, mapping, ranges) for e in s.a_index),
                                    b_index=tuple(_sub(e, mapping, ranges) for e in s.b_index))
        elif isinstance(s, WarpgroupMma):
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index),
                                    a_at=tuple(_sub(e, mapping, ranges) for e in s.a_at),
                                    b_at=tuple(_sub(e, mapping, ranges) for e in s.b_at))
        elif isinstance(s, Accumulate) and s.index:
            s = dataclasses.replace(s, index=tuple(_sub(e, mapping, ranges) for e in s.index))
        elif isinstance(s, Compute):
            s = dataclasses.replace(s, args=tuple(_sub(a, mapping, ranges) if isinstance(a, Affine) else a
                                                  for a in s.args))
        elif isinstance(s, Loop):
            s = Loop(s.var, s.extent, s.kind, substitute_body(s.body, mapping, ranges), s.role, s.unroll,
                     None if s.stop is None else _sub(s.stop, mapping, ranges))
        elif isinstance(s, StridedLoop):
            s = StridedLoop(s.var, _sub(s.start, mapping, ranges), s.stop, s.step, s.kind,
                            substitute_body(s.body, mapping, ranges), s.role, s.unroll)
        elif isinstance(s, Tile):
            s = Tile(s.axes, substitute_body(s.body, mapping, ranges))
        elif isinstance(s, Stage):
            s = dataclasses.replace(s, origin=tuple(_sub(e, mapping, ranges) for e in s.origin))
        out.append(s)
    return tuple(out)
