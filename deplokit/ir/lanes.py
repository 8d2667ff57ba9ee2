"""Plain facts about the index of an access in a vector loop: whether an affine form is a
multiple of n, which loop variables only take multiples of n, where the lane variable
sits in an index. No decision is made here: which accesses are one float4 is decided by
the schedule (deplokit.passes.vector_geometry) and stamped on them (Load.width,
Load.shared_width, Store.width); the lowering reads these facts only to prove bounds."""
from __future__ import annotations

from .index import Affine, Var, free_vars
from .tile_ir import StridedLoop, walk


def is_multiple(e: Affine, n: int, multiples=frozenset()) -> bool:
    """e is a multiple of n for every value of its variables (`multiples`: variables known
    to be multiples of n)."""
    if e.const % n:
        return False
    return all(c % n == 0 or (isinstance(atom, Var) and atom.name in multiples) for atom, c in e.terms)


def multiples_of(body, n: int) -> frozenset[str]:
    """Loop variables of `body` that only take multiples of n: strided loops whose start is
    one and whose step is one (a vectorised row phase: a2 = a3 * 4; += 1024)."""
    out: set[str] = set()
    for s, _ in walk(body):
        if isinstance(s, StridedLoop) and s.step % n == 0 and is_multiple(s.start, n, out):
            out.add(s.var)
    return frozenset(out)


def split_lane(e: Affine, lane: str) -> tuple[int, Affine] | None:
    """(coefficient of the variable `lane`, e without it), or None when `lane` also hides
    inside a `//`, `%` or gather of e."""
    coef, rest = 0, []
    for atom, c in e.terms:
        if isinstance(atom, Var) and atom.name == lane:
            coef = c
        elif lane in free_vars(Affine(((atom, 1),), 0)):
            return None
        else:
            rest.append((atom, c))
    return coef, Affine(tuple(rest), e.const)


def varies(index, lane: str) -> bool:
    """Whether the index depends on the variable `lane`."""
    return any(lane in free_vars(e) for e in index)


def row_major_offset(index, shape) -> Affine:
    """The flat element offset of `index` into a contiguous tensor of `shape`."""
    out, stride = Affine(), 1
    for e, extent in reversed(list(zip(index, shape))):
        out = out + e * stride
        stride *= extent
    return out
