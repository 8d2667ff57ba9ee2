"""The finishing touches on a loop nest build.py made: loop roles, loads grouped first,
stable names in print order (a0, in0, v0, acc0), the article's prologue/epilogue notes, and
how often each Tensor-IR node is evaluated (the fusion guard's recompute count)."""
from __future__ import annotations

from ...ir.index import Affine, rename
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store, walk
from ...ir.tensor_ir import STORAGE_OPS


def annotate_roles(body, roles):
    """Loop roles, and the article's prologue/epilogue notes in matmul-like kernels."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            s = Loop(s.var, s.extent, s.kind, annotate_roles(s.body, roles), roles.get(s.var, ""), stop=s.stop)
        out.append(s)
    return tuple(out)


def loads_first(body):
    """Loads first in each stretch of a body between loops: grouped where they are read,
    but never moved above a loop (which would keep them live across it)."""
    out, loads, rest = [], [], []
    for s in body:
        if isinstance(s, Loop):
            out += loads + rest
            loads, rest = [], []
            out.append(Loop(s.var, s.extent, s.kind, loads_first(s.body), s.role, stop=s.stop))
        elif isinstance(s, Load):
            loads.append(s)
        else:
            rest.append(s)
    return tuple(out + loads + rest)


def rename_in_print_order(body):
    """Stable names in print order: loop vars a0.., loads in0.., values v0.., accs acc0..
    Compute notes (the Tensor-IR origin) are kept aside for counting, then dropped."""
    # Accumulators are printed where they accumulate, which is after the values they fold;
    # numbering them by first appearance keeps acc0 the first reduction of the kernel.
    names = print_order_names(body)
    origins = {names[s.dst]: s.note for s, _ in walk(body) if isinstance(s, Compute)}
    return rename_body(body, names, notes=False), origins, names


def print_order_names(body) -> dict[str, str]:
    """old name -> its stable name in print order: a0.. (loop variables), in0.. (loads),
    v0.. (values), acc0.. (accumulators, by first appearance)."""
    names: dict[str, str] = {}
    counters = {"a": 0, "in": 0, "v": 0, "acc": 0}
    for s, _ in walk(body):
        if isinstance(s, Loop):
            old, cls = s.var, "a"
        elif isinstance(s, (Load, Compute)):
            old, cls = s.dst, "in" if isinstance(s, Load) else "v"
        elif isinstance(s, Accumulate):
            old, cls = s.acc, "acc"
        else:
            continue
        if old not in names:
            names[old] = f"{cls}{counters[cls]}"
            counters[cls] += 1
    return names


def rename_body(body, names: dict[str, str], loop_vars=None, notes: bool = True, roles: bool = True) -> tuple:
    """Every name the body defines renamed by `names`; in indices (and Affine operands) the
    loop variables only: `loop_vars` (old names; default the body's own loops; a
    statement's values never appear in an index). notes / roles False: Compute notes / loop
    roles dropped."""
    if loop_vars is None:
        loop_vars = {s.var for s, _ in walk(body) if isinstance(s, Loop)}
    var_names = {old: names[old] for old in loop_vars if old in names}

    def operand(a):
        if isinstance(a, str):
            return names.get(a, a)
        if isinstance(a, Affine):
            return rename(a, var_names)
        return a

    def index(ix):
        return tuple(rename(e, var_names) for e in ix)

    def rewrite(stmts):
        out = []
        for s in stmts:
            if isinstance(s, Loop):
                out.append(Loop(names[s.var], s.extent, s.kind, rewrite(s.body), s.role if roles else "",
                                stop=None if s.stop is None else rename(s.stop, var_names)))
            elif isinstance(s, Load):
                out.append(Load(names[s.dst], s.tensor, index(s.index), s.pad))
            elif isinstance(s, Compute):
                out.append(Compute(names[s.dst], s.op, tuple(operand(a) for a in s.args), s.note if notes else "",
                                   s.dtype))
            elif isinstance(s, Accumulate):
                out.append(Accumulate(names[s.acc], s.reduction, operand(s.value), dtype=s.dtype))
            else:
                out.append(Store(s.tensor, index(s.index), operand(s.value)))
        return tuple(out)

    return rewrite(body)


def article_notes(body):
    """Mark the first computation inside a matmul's K loop and the first after it, as the
    article's Loop IR does."""
    out = []
    after_k = False
    for s in body:
        if isinstance(s, Loop):
            inner = s.body
            if s.role == "K":
                computes = [c for c in inner if isinstance(c, Compute)]
                if len(computes) > 1:
                    first = computes[0]
                    inner = tuple(Compute(c.dst, c.op, c.args, "prologue (inside reduce)", c.dtype) if c is first else c
                                  for c in inner)
                after_k = True
            else:
                inner = article_notes(inner)
            s = Loop(s.var, s.extent, s.kind, inner, s.role, stop=s.stop)
        elif isinstance(s, Compute) and after_k:
            s = Compute(s.dst, s.op, s.args, "epilogue (outside reduce)", s.dtype)
            after_k = False
        out.append(s)
    return tuple(out)


def count_evaluations(body, origins, acc_red):
    evals: dict[str, int] = {}
    points: dict[str, int] = {}
    work = 0

    def rec(stmts, mult):
        nonlocal work
        for s in stmts:
            if isinstance(s, Loop):
                rec(s.body, mult * s.extent)
            elif isinstance(s, Compute) and s.op in STORAGE_OPS:
                continue    # a half load's conversion, a TF32 operand: part of the load
            elif isinstance(s, (Load, Compute, Accumulate)):
                work += mult
                if isinstance(s, Compute):
                    o = origins[s.dst]
                    evals[o] = evals.get(o, 0) + mult
                elif isinstance(s, Accumulate):
                    r = acc_red[s.acc]
                    points[r] = points.get(r, 0) + mult
    rec(body, 1)
    return evals, points, work
