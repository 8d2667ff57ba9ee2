"""Index expressions: how an IR names an element of a tensor.

An index is an affine form over atoms (loop variables, floor-divisions, remainders and
gathers of integer tensors). Reshapes produce `//` and `%`; `simplify` removes them again
when the variable ranges prove them redundant, so `view(view(x))` prints as `x[i, j]`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Union

import numpy as np

# Names of a tensor's dimensions in Tensor-IR index maps, by position.
DIM_NAMES = "ijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class FloorDiv:
    expr: "Affine"
    divisor: int

    def __str__(self) -> str:
        return f"{_paren(self.expr)} // {self.divisor}"


@dataclass(frozen=True)
class Mod:
    expr: "Affine"
    divisor: int

    def __str__(self) -> str:
        return f"{_paren(self.expr)} % {self.divisor}"


@dataclass(frozen=True)
class Gather:
    """The integer value stored in `tensor` at `index` (embedding ids)."""
    tensor: str
    index: tuple["Affine", ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(str(e) for e in self.index)}]"


Atom = Union[Var, FloorDiv, Mod, Gather]


@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    # -- construction -------------------------------------------------------------
    def __add__(self, other: "Affine | int") -> "Affine":
        other = as_affine(other)
        coefs: dict[Atom, int] = {}     # insertion-ordered: the atoms in first-seen order
        for atom, c in self.terms + other.terms:
            coefs[atom] = coefs.get(atom, 0) + c
        terms = tuple((a, c) for a, c in coefs.items() if c != 0)
        out = Affine(terms, self.const + other.const)
        for a, _ in terms:              # a hot path of every pass: no generator
            if type(a) is Mod:
                return _recombine(out)
        return out

    __radd__ = __add__

    def __mul__(self, k: int) -> "Affine":
        if k == 0:
            return Affine()
        return Affine(tuple((a, c * k) for a, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def __sub__(self, other: "Affine | int") -> "Affine":
        return self + as_affine(other) * -1

    def __neg__(self) -> "Affine":
        return self * -1

    # -- queries --------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def atoms(self) -> tuple[Atom, ...]:
        return tuple(a for a, _ in self.terms)

    def __str__(self) -> str:
        parts: list[str] = []
        for atom, c in self.terms:
            text = str(atom)
            if isinstance(atom, (FloorDiv, Mod)) and len(self.terms) > 1:
                text = f"({text})"
            if c == 1:
                term, sign = text, "+"
            elif c == -1:
                term, sign = text, "-"
            else:
                term, sign = f"{text} * {abs(c)}", "+" if c > 0 else "-"
            if not parts:
                parts.append(term if sign == "+" else f"-{term}")
            else:
                parts.append(f"{sign} {term}")
        if self.const or not parts:
            if not parts:
                parts.append(str(self.const))
            else:
                parts.append(f"{'+' if self.const > 0 else '-'} {abs(self.const)}")
        return " ".join(parts)


def _recombine(e: Affine) -> Affine:
    """(x // d) * (c * d) + (x % d) * c  ->  x * c: an axis split and merged back."""
    coefs = dict(e.terms)
    for atom, c in e.terms:
        if isinstance(atom, Mod):
            div = FloorDiv(atom.expr, atom.divisor)
            if coefs.get(div) == c * atom.divisor:
                rest = Affine(tuple((a, k) for a, k in e.terms if a not in (atom, div)), e.const)
                return rest + atom.expr * c
    return e


def _paren(e: Affine) -> str:
    s = str(e)
    return f"({s})" if len(e.terms) + (1 if e.const else 0) > 1 or (e.terms and e.terms[0][1] != 1) else s


def as_affine(x: "Affine | Atom | int") -> Affine:
    if isinstance(x, Affine):
        return x
    if isinstance(x, (int, np.integer)):
        return Affine((), int(x))
    return Affine(((x, 1),), 0)


def var(name: str) -> Affine:
    return Affine(((Var(name), 1),), 0)


def const(c: int) -> Affine:
    return Affine((), int(c))


# -- ranges and simplification -------------------------------------------------------
Ranges = Mapping[str, int]  # variable name -> extent (values 0 .. extent-1)


def bounds(e: Affine, ranges: Ranges) -> tuple[int, int] | None:
    """Inclusive [lo, hi] of e over the ranges, or None where an atom is unbounded."""
    lo = hi = e.const
    for atom, c in e.terms:
        b = _atom_bounds(atom, ranges)
        if b is None:
            return None
        a_lo, a_hi = b
        lo += min(c * a_lo, c * a_hi)
        hi += max(c * a_lo, c * a_hi)
    return lo, hi


def _atom_bounds(atom: Atom, ranges: Ranges) -> tuple[int, int] | None:
    if isinstance(atom, Var):
        ext = ranges.get(atom.name)
        return None if ext is None else (0, ext - 1)
    if isinstance(atom, FloorDiv):
        b = bounds(atom.expr, ranges)
        return None if b is None else (b[0] // atom.divisor, b[1] // atom.divisor)
    if isinstance(atom, Mod):
        b = bounds(atom.expr, ranges)
        if b is not None and 0 <= b[0] and b[1] < atom.divisor:
            return b
        return 0, atom.divisor - 1
    return None


def _split(e: Affine, d: int) -> tuple[Affine, Affine]:
    """e = d * q + r with every coefficient of r in [0, d)."""
    q_terms, r_terms = [], []
    for atom, c in e.terms:
        qc, rc = divmod(c, d)
        if qc:
            q_terms.append((atom, qc))
        if rc:
            r_terms.append((atom, rc))
    qc, rc = divmod(e.const, d)
    return Affine(tuple(q_terms), qc), Affine(tuple(r_terms), rc)


def floordiv(e: Affine, d: int, ranges: Ranges = {}) -> Affine:
    if d == 1:
        return e
    q, r = _split(e, d)
    b = bounds(r, ranges)
    if b is not None and 0 <= b[0] and b[1] < d:
        return q
    if r.is_const:
        return q + r.const // d
    # (x // a) // b == x // (a * b)
    if len(r.terms) == 1 and r.const == 0 and r.terms[0][1] == 1 and isinstance(r.terms[0][0], FloorDiv):
        inner = r.terms[0][0]
        return q + floordiv(inner.expr, inner.divisor * d, ranges)
    common = _common_factor(r, d, ranges)
    if common is not None:            # (m * a + b) // (m * k) == a // k  where 0 <= b < m
        m, a, _ = common
        return q + floordiv(a, d // m, ranges)
    return q + as_affine(FloorDiv(r, d))


def _common_factor(r: Affine, d: int, ranges: Ranges):
    """(m, a, b) with r = m * a + b, m > 1 dividing d and 0 <= b < m over the ranges, the
    largest such m among the terms' common factors with d; None when there is none. A
    flat index split by a reshape and recombined (an expand + reshape: HF's repeat_kv gives
    (h * S * D + s * D + d) // (n_rep * S * D)) is a whole multiple plus a part below m."""
    for m in sorted({math.gcd(c, d) for _, c in r.terms} - {1, d}, reverse=True):
        big = tuple((atom, c // m) for atom, c in r.terms if c % m == 0)
        rest = Affine(tuple((atom, c) for atom, c in r.terms if c % m), r.const % m)
        b = bounds(rest, ranges)
        if big and b is not None and 0 <= b[0] and b[1] < m:
            return m, Affine(big, r.const // m), rest
    return None


def mod(e: Affine, d: int, ranges: Ranges = {}) -> Affine:
    if d == 1:
        return const(0)
    _, r = _split(e, d)
    b = bounds(r, ranges)
    if b is not None and 0 <= b[0] and b[1] < d:
        return r
    if r.is_const:
        return const(r.const % d)
    common = _common_factor(r, d, ranges)
    if common is not None:            # (m * a + b) % (m * k) == m * (a % k) + b  where 0 <= b < m
        m, a, b = common
        return mod(a, d // m, ranges) * m + b
    return as_affine(Mod(r, d))


def substitute(e: Affine, mapping: Mapping[str, Affine], ranges: Ranges = {}) -> Affine:
    """Replace variables by expressions, re-simplifying divisions under `ranges`."""
    out = const(e.const)
    for atom, c in e.terms:
        out = out + _subst_atom(atom, mapping, ranges) * c
    return out


def _subst_atom(atom: Atom, mapping: Mapping[str, Affine], ranges: Ranges) -> Affine:
    if isinstance(atom, Var):
        return mapping.get(atom.name, as_affine(atom))
    if isinstance(atom, FloorDiv):
        return floordiv(substitute(atom.expr, mapping, ranges), atom.divisor, ranges)
    if isinstance(atom, Mod):
        return mod(substitute(atom.expr, mapping, ranges), atom.divisor, ranges)
    return as_affine(Gather(atom.tensor, tuple(substitute(i, mapping, ranges) for i in atom.index)))


def rename(e: Affine, names: Mapping[str, str]) -> Affine:
    # variables alone, renamed to distinct names: the terms as they are, nothing to simplify
    # (a hot path: every kernel fusion builds is renamed into print order)
    if all(type(atom) is Var for atom, _ in e.terms):
        terms = tuple((Var(names.get(atom.name, atom.name)), c) for atom, c in e.terms)
        if len({atom for atom, _ in terms}) == len(terms):
            return Affine(terms, e.const)
    return substitute(e, {old: var(new) for old, new in names.items()})


def free_vars(e: Affine) -> frozenset[str]:
    out: set[str] = set()
    for atom, _ in e.terms:
        out |= _atom_vars(atom)
    return frozenset(out)


def _atom_vars(atom: Atom) -> set[str]:
    if isinstance(atom, Var):
        return {atom.name}
    if isinstance(atom, (FloorDiv, Mod)):
        return set(free_vars(atom.expr))
    out: set[str] = set()
    for i in atom.index:
        out |= free_vars(i)
    return out


def gathers(e: Affine) -> tuple[Gather, ...]:
    """The gathers inside e, innermost first."""
    out: list[Gather] = []
    for atom, _ in e.terms:
        if isinstance(atom, (FloorDiv, Mod)):
            out.extend(gathers(atom.expr))
        elif isinstance(atom, Gather):
            for i in atom.index:
                out.extend(gathers(i))
            out.append(atom)
    return tuple(out)


def evaluate(e: Affine, env: Mapping[str, np.ndarray], tensors: Mapping[str, np.ndarray] = {}):
    """Vectorised value of e: env maps variables to broadcastable integer arrays."""
    out = np.int64(e.const)
    for atom, c in e.terms:
        out = out + _eval_atom(atom, env, tensors) * c
    return out


def _eval_atom(atom: Atom, env, tensors):
    if isinstance(atom, Var):
        return env[atom.name]
    if isinstance(atom, FloorDiv):
        return evaluate(atom.expr, env, tensors) // atom.divisor
    if isinstance(atom, Mod):
        return evaluate(atom.expr, env, tensors) % atom.divisor
    table = tensors[atom.tensor]
    # A lane past the end (an inactive branch of a cat or pad) reads a valid id, as the Kernel
    # lowering clamps it (ir/kernel_expr.guard): the load it feeds is masked anyway.
    idx = tuple(np.clip(evaluate(i, env, tensors), 0, max(extent - 1, 0))
                for i, extent in zip(atom.index, table.shape))
    return table[idx].astype(np.int64)


def format_index(index: tuple[Affine, ...]) -> str:
    return ", ".join(str(e) for e in index)


def covers_once(e, extents: dict, n: int) -> bool:
    """`e` takes each of 0 .. n-1 once over the unrolled loops it names: one loop of n, or
    loops split mixed-radix (q * 4 + v: v of 4, q of n / 4)."""
    if e.const or not e.terms or any(not isinstance(a, Var) or a.name not in extents for a, _ in e.terms):
        return False
    size = 1
    for a, c in sorted(e.terms, key=lambda t: t[1]):
        if c != size:
            return False
        size *= extents[a.name]
    return size == n


def stride_one(e: Affine, name: str) -> bool:
    """e = name + (terms of other variables): the dimension a stage's slab axis can run along."""
    return any(a == Var(name) and c == 1 for a, c in e.terms) and \
        not any(name in free_vars(as_affine(a)) for a, _ in e.terms if a != Var(name))


# -- C's integer division ------------------------------------------------------------------
# An Affine's FloorDiv and Mod floor (Python's and torch's semantics; indices are
# non-negative, where C agrees). Kernel IR's `/` and `%` on integers are C's: the quotient
# truncated toward zero, the remainder with the dividend's sign. Written once, for Python ints
# and numpy integer arrays alike (the simulator, the tuner's address evaluation).

def c_div(a, b):
    """a / b as C computes it on integers: the quotient truncated toward zero."""
    q = a // b
    return q + ((q < 0) & (a - q * b != 0))


def c_rem(a, b):
    """a % b as C computes it on integers: a - b * (a / b), the sign of a."""
    return a - b * c_div(a, b)
