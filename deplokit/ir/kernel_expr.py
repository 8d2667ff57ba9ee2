"""Tile-IR index arithmetic as Kernel-IR expressions: affine forms, flat offsets, and the
guard that keeps an access inside its tensor. Pure functions shared by every lowering pass
(passes/lower/, passes/mma/mma_lower.py)."""
from __future__ import annotations

from . import kernel_ir as K
from .index import Affine, FloorDiv, Mod, Var, bounds


def affine_expr(e: Affine) -> K.Expr:
    out: K.Expr | None = None
    for atom, c in e.terms:
        term = _atom_expr(atom)
        if c != 1:
            term = K.Binary("*", term, K.Const(c, "int"))
        out = term if out is None else K.Binary("+", out, term)
    if out is None:
        return K.Const(e.const, "int")
    if e.const:
        out = K.Binary("+", out, K.Const(e.const, "int")) if e.const > 0 else \
            K.Binary("-", out, K.Const(-e.const, "int"))
    return out


def _atom_expr(atom) -> K.Expr:
    if isinstance(atom, Var):
        return K.Var(atom.name)
    if isinstance(atom, FloorDiv):
        return K.Binary("/", affine_expr(atom.expr), K.Const(atom.divisor, "int"))
    if isinstance(atom, Mod):
        return K.Binary("%", affine_expr(atom.expr), K.Const(atom.divisor, "int"))
    raise TypeError(atom)   # gathers are loaded into registers first (LoweringState.index_exprs)


def flat_offset(exprs, shape) -> K.Expr:
    """The row-major element offset of index `exprs` into a tensor of `shape`."""
    out = None
    stride = 1
    for e, extent in reversed(list(zip(exprs, shape))):
        term = e if stride == 1 else K.Binary("*", e, K.Const(stride, "int"))
        if not (isinstance(e, K.Const) and e.value == 0):
            out = term if out is None else K.Binary("+", term, out)
        stride *= extent
    return out if out is not None else K.Const(0, "int")


def guard(index, exprs, shape, ranges):
    """(in-bounds condition, clamped index expressions) of an access tensor[index] whose
    components are `exprs`: the condition is None where `ranges` prove every component
    inside; a component that may leave is clamped, so a masked access still reads a valid
    element."""
    cond = None
    safe = []
    for e, ex, extent in zip(index, exprs, shape):
        b = bounds(e, ranges)
        lo_ok = b is not None and b[0] >= 0
        hi_ok = b is not None and b[1] < extent
        c = None
        if not lo_ok:
            c = K.Binary(">=", ex, K.Const(0, "int"))
        if not hi_ok:
            hi = K.Binary("<", ex, K.Const(extent, "int"))
            c = hi if c is None else K.Binary("&&", c, hi)
        if c is not None:
            cond = c if cond is None else K.Binary("&&", cond, c)
            if not lo_ok:
                ex = K.Binary("max", ex, K.Const(0, "int"))
            if not hi_ok:
                ex = K.Binary("min", ex, K.Const(extent - 1, "int"))
        safe.append(ex)
    return cond, safe


def plus(base, e):
    """base + e, dropping a missing base or a zero e."""
    if base is None:
        return e
    if isinstance(e, K.Const) and e.value == 0:
        return base
    return K.Binary("+", base, e)
