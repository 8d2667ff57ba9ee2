"""Pass 008's register loops: wrapping each run of statements in the slot loops of a register
tile. A value one run computed per slot is out of scope in a later run, which recomputes it
(and what it is made of) inside its own slot loop; copies nothing reads any more are dropped."""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, free_vars, var
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.tile_ir import StridedLoop

_LEAVES = (Load, Compute, Accumulate, Store)


def nest_body(body, regs, accs, after_reduce, earlier=None, recomputed=None):
    """Wrap every run of leaf statements in the register loops; recurse into loops. A run
    after a reduce loop (the epilogue) reads the accumulators back from the register tile.

    Each run gets register loops of its own, so a value a run computed per slot (inside
    its register loops) is out of scope in every later run: a later run that reads one
    recomputes it, and whatever per-slot values it is made of, in its own slot loop
    (`earlier`: name -> (statement, per slot) of the values computed before this body;
    the names recomputed are added to `recomputed`)."""
    earlier = dict(earlier or {})
    recomputed = set() if recomputed is None else recomputed
    out, run = [], []
    seen_reduce = after_reduce

    def flush():
        stmts = _recompute(run, earlier)
        recomputed.update(st.dst for st in stmts[:len(stmts) - len(run)])
        nest, per_slot = _nest(stmts, regs, accs if seen_reduce else ())
        for st in stmts:
            if isinstance(st, (Load, Compute)):
                earlier[st.dst] = (st, st.dst in per_slot)
        return nest

    for s in body:
        if isinstance(s, _LEAVES):
            run.append(s)
            continue
        out += flush()
        run = []
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=nest_body(s.body, regs, accs, seen_reduce, earlier, recomputed))
            seen_reduce = seen_reduce or s.kind == "reduce"
        out.append(s)
    out += flush()
    return tuple(out)


def _recompute(run, earlier) -> list:
    """`run` preceded by the statements that recompute the per-slot values of earlier runs
    it reads (dependencies first; values computed outside the slot loops are still in scope)."""
    have = {s.dst for s in run if isinstance(s, (Load, Compute))}
    needed = []

    def want(name):
        if name in have or name not in earlier or not earlier[name][1]:
            return
        have.add(name)
        stmt = earlier[name][0]
        for op in _operands(stmt):
            want(op)
        needed.append(stmt)

    for s in run:
        for name in _operands(s):
            want(name)
    return needed + list(run)


def drop_dead(body, names):
    """`body` without the computations of `names` that nothing in their scope reads any more
    (a value every later reader recomputes in its own slot loop)."""
    out = []
    for i, s in enumerate(body):
        if (isinstance(s, (Load, Compute)) and s.dst in names
                and not any(s.dst in _reads_below(later) for later in body[i + 1:])):
            continue
        if isinstance(s, (Loop, StridedLoop)):
            s = dataclasses.replace(s, body=drop_dead(s.body, names))
            if not s.body and isinstance(s, Loop) and s.kind == "register":
                continue
        out.append(s)
    out = tuple(out)
    return out if out == tuple(body) else drop_dead(out, names)


def _reads_below(s) -> set[str]:
    """The value names `s` and the statements nested in it read (conservatively: every
    string in them but a definition's own name)."""
    if isinstance(s, str):
        return {s}
    if isinstance(s, tuple):
        return set().union(*(_reads_below(x) for x in s)) if s else set()
    if not dataclasses.is_dataclass(s) or isinstance(s, type):
        return set()
    out = set()
    for f in dataclasses.fields(s):
        if f.name == "dst" and isinstance(s, (Load, Compute)):
            continue
        out |= _reads_below(getattr(s, f.name))
    return out


def _nest(run, regs, accs):
    """Statements -> (the register nest, the names computed per slot): each statement at the
    depth of the deepest register loop its indices or operands depend on (0: outside every
    register loop), in order within a depth."""
    if not run:
        return [], set()
    rvars = [lp.var for lp in regs]
    index = tuple(var(v) for v in rvars)
    read = {a: f"{a}_v" for a in accs if _reads(run, a)}
    stmts = [Load(read[a], a, index) for a in read] + [_rename(s, read, index) for s in run]
    depth_of: dict[str, int] = {}
    levels: list[list] = [[] for _ in range(len(regs) + 1)]
    for s in stmts:
        d = 0
        for v in _index_vars(s):
            if v in rvars:
                d = max(d, rvars.index(v) + 1)
        for name in _operands(s):
            d = max(d, depth_of.get(name, 0))
        if isinstance(s, Accumulate) or (isinstance(s, Load) and s.tensor in accs):
            d = len(regs)
        if isinstance(s, (Load, Compute)):
            depth_of[s.dst] = d
        levels[d].append(s)
    inner: tuple = ()
    for depth in range(len(regs), 0, -1):
        body = tuple(levels[depth]) + inner
        inner = (dataclasses.replace(regs[depth - 1], body=body),) if body else ()
    return list(levels[0]) + list(inner), {name for name, d in depth_of.items() if d > 0}


def _reads(run, acc) -> bool:
    return any(acc in _operands(s) for s in run)


def _rename(s, read, index):
    if isinstance(s, Accumulate):      # may fold an earlier accumulator (a sum of a matmul's results)
        return dataclasses.replace(s, index=index, value=read.get(s.value, s.value))
    if not read:
        return s
    if isinstance(s, Compute):
        return dataclasses.replace(s, args=tuple(read.get(a, a) if isinstance(a, str) else a for a in s.args))
    if isinstance(s, Store) and isinstance(s.value, str):
        return dataclasses.replace(s, value=read.get(s.value, s.value))
    return s


def _index_vars(s) -> set[str]:
    out: set[str] = set()
    exprs = []
    if isinstance(s, (Load, Store)):
        exprs += list(s.index)
    if isinstance(s, Store) and isinstance(s.value, Affine):
        exprs.append(s.value)
    if isinstance(s, Compute):
        exprs += [a for a in s.args if isinstance(a, Affine)]
    for e in exprs:
        out |= free_vars(e)
    return out


def _operands(s) -> list[str]:
    if isinstance(s, Compute):
        return [a for a in s.args if isinstance(a, str)]
    if isinstance(s, Accumulate):
        return [s.value]
    if isinstance(s, Store) and isinstance(s.value, str):
        return [s.value]
    return []
