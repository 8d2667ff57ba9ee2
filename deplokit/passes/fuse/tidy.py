"""The finishing touches on a loop nest build.py made: loop roles, loads grouped first,
stable names in print order (a0, in0, v0, acc0), the article's prologue/epilogue notes, and
how often each Tensor-IR node is evaluated (the fusion guard's recompute count)."""
from __future__ import annotations

from ...ir.index import Affine, rename
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store


def annotate_roles(body, roles):
    """Loop roles, and the article's prologue/epilogue notes in matmul-like kernels."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            s = Loop(s.var, s.extent, s.kind, annotate_roles(s.body, roles), roles.get(s.var, ""))
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
            out.append(Loop(s.var, s.extent, s.kind, loads_first(s.body), s.role))
        elif isinstance(s, Load):
            loads.append(s)
        else:
            rest.append(s)
    return tuple(out + loads + rest)


def rename_in_print_order(body):
    """Stable names in print order: loop vars a0.., loads in0.., values v0.., accs acc0..
    Compute notes (the Tensor-IR origin) are kept aside for counting, then rewritten."""
    names: dict[str, str] = {}
    counters = {"a": 0, "in": 0, "v": 0, "acc": 0}
    origins: dict[str, str] = {}

    def fresh(old, cls):
        if old not in names:
            names[old] = f"{cls}{counters[cls]}"
            counters[cls] += 1
        return names[old]

    def assign(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                fresh(s.var, "a")
                assign(s.body)
            elif isinstance(s, Load):
                fresh(s.dst, "in")
            elif isinstance(s, Compute):
                fresh(s.dst, "v")
            elif isinstance(s, Accumulate):
                fresh(s.acc, "acc")

    # Accumulators are printed where they accumulate, which is after the values they fold;
    # numbering them by first appearance keeps acc0 the first reduction of the kernel.
    assign(body)
    var_names = {k: v for k, v in names.items() if k.startswith(("%o", "%r"))}

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
                out.append(Loop(names[s.var], s.extent, s.kind, rewrite(s.body), s.role))
            elif isinstance(s, Load):
                out.append(Load(names[s.dst], s.tensor, index(s.index), s.pad))
            elif isinstance(s, Compute):
                origins[names[s.dst]] = s.note
                out.append(Compute(names[s.dst], s.op, tuple(operand(a) for a in s.args), dtype=s.dtype))
            elif isinstance(s, Accumulate):
                out.append(Accumulate(names[s.acc], s.reduction, operand(s.value), dtype=s.dtype))
            else:
                out.append(Store(s.tensor, index(s.index), operand(s.value)))
        return tuple(out)

    return rewrite(body), origins, names


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
            s = Loop(s.var, s.extent, s.kind, inner, s.role)
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
