"""Prologues 007 applies while staging (Stage.prologue): an elementwise chain whose every
leaf is a load of the same slab (same origin, axes and index into the slab: silu(gate) * up
reads gate[m, k] and up[m, k]) is computed once per staged element, between the global
loads and the shared store, instead of once per use in the K loop (every thread along N
recomputed it). The fusion guard let such a prologue into the contraction counting exactly
that (fuse/guard.py: staged_extra); here the schedule carries it out and records it on the
Stage.

A chain is a Compute whose operands are constants or values of the chain; its root is the
value a statement outside the chain reads (the product with B). Each root becomes one stage;
a chain whose intermediate values another root also reads is left in the loop."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.index import Affine
from ...ir.loop_ir import Accumulate, Assign, Compute, Load, Loop, Store
from ...ir.tile_ir import StridedLoop, Tile


@dataclass(frozen=True)
class Prologue:
    root: Compute
    chain: tuple[Compute, ...]      # in program order, root last
    leaves: tuple[Load, ...]        # the loads it reads, in program order
    key: tuple                      # 007's group key of the first leaf (scope, tensor, origin, dims)


def _reads(s) -> set[str]:
    """Value names a statement (and everything nested in it) reads."""
    if isinstance(s, Compute):
        return {a for a in s.args if isinstance(a, str)}
    if isinstance(s, Accumulate):
        return {s.value} if isinstance(s.value, str) else set()
    if isinstance(s, (Store, Assign)):
        v = getattr(s, "value", None)
        return {v} if isinstance(v, str) else set()
    if isinstance(s, (Loop, StridedLoop, Tile)):
        out: set[str] = set()
        for t in s.body:
            out |= _reads(t)
        return out
    return set()


def find_prologues(body, leaf_key: dict[int, tuple], shapes: dict[str, tuple], in_k: bool = False) -> list[Prologue]:
    """The prologue chains in `body` and its nested loops. leaf_key: id(load) -> (007's group
    key, the load's index into the slab) for each load 007 could stage; shapes: tensor shapes
    (the leaves of one chain share the tensor shape, so one flat offset reads them all)."""
    out: list[Prologue] = []
    for s in body:
        if isinstance(s, (Loop, StridedLoop)):
            out += find_prologues(s.body, leaf_key, shapes, in_k or s.role == "K")
    if not in_k:          # a contraction's operand only (the guard's staged prologue), not a norm's row
        return out
    geometry: dict[str, tuple] = {}     # value -> (scope, origin, dims, slab index, shape)
    defs: dict[str, object] = {}
    for s in body:
        if isinstance(s, Load) and id(s) in leaf_key:
            (scope, tensor, origin, dims), index = leaf_key[id(s)]
            geometry[s.dst] = (scope, origin, dims, index, tuple(shapes[tensor]))
            defs[s.dst] = s
        elif isinstance(s, Compute) and s.dtype == "float32":
            if any(isinstance(a, Affine) for a in s.args):
                continue
            geos = {geometry.get(a) for a in s.args if isinstance(a, str)}
            if len(geos) == 1 and None not in geos:
                geometry[s.dst] = geos.pop()
                defs[s.dst] = s
    pure = {n for n, d in defs.items() if isinstance(d, Compute)}
    used_outside: set[str] = set()
    for s in body:
        if isinstance(s, Compute) and s.dst in pure:
            continue
        used_outside |= _reads(s)
    roots = [defs[n] for n in pure if n in used_outside]
    chains = {}
    for root in roots:
        seen, todo = set(), [root.dst]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in pure:
                todo += [a for a in defs[n].args if isinstance(a, str)]
        chains[root.dst] = seen
    for root in roots:
        others = set().union(*(c for r, c in chains.items() if r != root.dst)) if len(chains) > 1 else set()
        mine = chains[root.dst]
        if {n for n in mine if n in pure} & others:
            continue                      # shares a computed value with another root
        leaves = tuple(s for s in body if isinstance(s, Load) and s.dst in mine)
        chain = tuple(s for s in body if isinstance(s, Compute) and s.dst in mine)
        if all(c.op == "convert" for c in chain):
            continue                      # a plain stage converts as it copies (or 008 reads halves raw)
        out.append(Prologue(root, chain, leaves, leaf_key[id(leaves[0])][0]))
    return out


def leaf_uses_outside(body, prologues: list[Prologue]) -> set[str]:
    """Leaf loads some statement other than the staged chains reads (those loads stay)."""
    chained = {id(c) for p in prologues for c in p.chain}
    out: set[str] = set()

    def rec(stmts):
        for s in stmts:
            if id(s) in chained:
                continue
            if isinstance(s, (Loop, StridedLoop, Tile)):
                rec(s.body)
            else:
                out.update(_reads(s))
    rec(body)
    return out
