"""Recognise attention in a row-fused kernel: the pieces flash attention is rebuilt from.

Row fusion (rows.py) merges attention's kernels into one row body of five phases, whatever
the source wrote (sdpa with or without a mask, causal, GQA, or matmul -> softmax -> matmul):

    for a2 in 0..T:  # free           scores:  dot product over head_dim, scale, mask
        for a3 in 0..D:  # reduce          -> local scores[a2]
    for a4 in 0..T:  # reduce         row max of x = f(scores[a4], mask...)
    for a5 in 0..T:  # reduce         row sum of exp(x - max)
    (row values of the max: a fully masked row's test)
    for a6 in 0..T:  # free           probs = exp(x - max) / sum [zeroed by that test]
    for a7 in 0..Dv:  # free          out = sum over keys of probs * v
        for a8 in 0..T:  # reduce

`match_attention` checks that shape and returns the statements of each piece, ready to be
re-nested key by key (attention_loop.py); otherwise the reason it is not attention.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.index import Affine, free_vars
from ...ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, Store, walk
from ...ir.tensor_ir import CONVERT_OP
from ..fuse.tidy import rename_body
from ..rows.rows import defined_names, row_loops


@dataclass(frozen=True)
class AttentionParts:
    rows: tuple[Loop, ...]        # the row loops (batch, heads, queries), outermost first
    key: str                      # the key loop's variable (every piece below uses it)
    keys: int                     # T
    score: tuple                  # statements computing one score x (dot loop, scale, mask)
    x: str                        # the score's value name
    zero_if: tuple                # row statements testing the final max (a fully masked row)
    zero_cond: str                # their condition: the row's output is 0 where it holds ('' none)
    running_max: str              # the name those statements read the max by
    column: str                   # the output column loop's variable (0..Dv)
    columns: int                  # Dv
    value: Load                   # v[..., key, column]
    epilogue: tuple               # statements after P @ V's sum, up to the store
    acc: str                      # the name the epilogue reads P @ V's sum by
    store: Store                  # out[..., column] = ...
    scores_local: str             # the row fusion locals this replaces
    probs_local: str
    prologue: tuple = ()          # row statements before the keys (values hoisted out of the key loop)
    widen: Compute | None = None  # `convert(value) -> float32` of half values, else None


def rename_var(body, old: str, new: str) -> tuple:
    """Every use of loop variable `old` (indices and index operands) renamed to `new`."""
    names: dict = {}
    defined_names(body, names, "")
    names[old] = new
    return rename_body(body, names, {s.var for s, _ in walk(body) if isinstance(s, Loop)} | {old})


def match_attention(kernel: Kernel, row_depth: int) -> AttentionParts | str:
    """The pieces of a row-fused attention kernel, or why it is not one."""
    rows = tuple(row_loops(kernel)[:row_depth])
    if not row_depth:
        return "it has no row loops (one query row: no query tiles to spread over blocks)"
    if len(rows) != row_depth:
        return "its row loops are not perfectly nested"
    body = rows[-1].body
    if len(kernel.locals) != 2:
        return "it keeps more than the scores and probabilities on chip"
    scores_local, probs_local = (b.name for b in kernel.locals)
    phases = [s for s in body if isinstance(s, Loop)]
    between = [s for s in body if not isinstance(s, Loop)]
    if len(phases) != 5 or [p.kind for p in phases] != ["free", "reduce", "reduce", "free", "free"]:
        return "its row body is not scores, max, sum, probabilities, P @ V"
    s_ph, m_ph, e_ph, p_ph, o_ph = phases
    key, keys = s_ph.var, s_ph.extent
    if any(p.extent != keys for p in phases[1:4]):
        return "its phases do not run over the same keys"
    # scores: ... then `scores[..., key] = value`, the last statement
    last = s_ph.body[-1]
    if not (isinstance(last, Store) and last.tensor == scores_local) or \
            any(isinstance(s, Store) for s in s_ph.body[:-1]):
        return "its scores phase does not end with the scores row's store"
    score = s_ph.body[:-1]
    row_vars = {lp.var for lp in rows}
    # a position used as a value inside the dot product (triu(q) or tril(k) fused into the
    # scores): the flash kernel re-tiles rows, keys and the head dimension, and renames indices only
    if any(isinstance(st, Compute) and any(isinstance(a, Affine) and free_vars(a) for a in st.args)
           for lp in score if isinstance(lp, Loop) for st, _ in walk(lp.body)):
        return "its dot product computes with a position (a mask on q or k fused into the scores)"
    # max: x = f(scores[key], ...); acc <- max(acc, x)
    m_body = rename_var(m_ph.body, m_ph.var, key)
    if not (isinstance(m_body[-1], Accumulate) and m_body[-1].reduction == "max"):
        return "its max phase does not end with a max"
    running_max, x = m_body[-1].acc, m_body[-1].value
    extra, alias = _read_scores(m_body[:-1], scores_local, last.value)
    if not alias:
        return "its max phase does not read the scores row"
    score += tuple(extra)
    x = alias.get(x, x)
    if any(isinstance(s, (Store, Loop, Accumulate)) for s in m_body[:-1]):
        return "its max phase does more than a row max"
    # sum: exp(x - max) summed
    e_tail = [s for s in e_ph.body if isinstance(s, (Compute, Accumulate))][-3:]
    if not (len(e_tail) == 3 and _is(e_tail[0], "subtract", (None, running_max)) and _is(e_tail[1], "exp")
            and isinstance(e_tail[2], Accumulate) and e_tail[2].reduction == "sum"):
        return "its sum phase is not a sum of exp(x - max)"
    running_sum = e_tail[2].acc
    # the row values of the max (a fully masked row's test), between the phases
    # (values read before the scores, hoisted out of the key loop by fusion, say a runtime
    # position: the flash kernel computes them once a row, before its keys)
    prologue = tuple(body[:body.index(s_ph)])
    if any(isinstance(s, (Store, Accumulate)) for s in prologue):
        return "its row stores something before the scores"
    between = [s for s in between if s not in prologue]
    zero_if = tuple(s for s in between if isinstance(s, Compute))
    if len(zero_if) != len(between) or any(running_sum in s.args for s in zero_if):
        return "its row statements are not tests of the max"
    # probabilities: exp(x - max) / sum [where(test, 0, p)], stored
    p_tail = [s for s in p_ph.body if isinstance(s, Compute)]
    p_store = p_ph.body[-1]
    if not (isinstance(p_store, Store) and p_store.tensor == probs_local):
        return "its probabilities phase does not store the probabilities row"
    zero_cond, probs = "", p_store.value
    if p_tail and p_tail[-1].op == "where" and p_tail[-1].args[1] == 0.0 and p_tail[-1].dst == probs:
        zero_cond, probs = p_tail[-1].args[0], p_tail[-1].args[2]
        p_tail = p_tail[:-1]
    if not (len(p_tail) >= 3 and _is(p_tail[-1], "divide", (None, running_sum)) and p_tail[-1].dst == probs
            and _is(p_tail[-2], "exp") and _is(p_tail[-3], "subtract", (None, running_max))):
        return "its probabilities are not exp(x - max) / sum"
    if zero_cond and zero_cond not in {s.dst for s in zero_if}:
        return "its probabilities are zeroed by a test that is not of the row max"
    # P @ V: for column: for key: p * v summed; epilogue; store
    o_body = o_ph.body
    inner = [s for s in o_body if isinstance(s, Loop)]
    if len(inner) != 1 or inner[0].kind != "reduce" or inner[0].extent != keys or o_body[0] is not inner[0]:
        return "its P @ V phase is not a sum over the keys per output column"
    pv = rename_var(inner[0].body, inner[0].var, key)
    loads = [s for s in pv if isinstance(s, Load)]
    rest = [s for s in pv if not isinstance(s, Load)]
    probs_load = [s for s in loads if s.tensor == probs_local]
    v_load = [s for s in loads if s.tensor != probs_local]
    # half values: `convert(v) -> float32` (exact) before the multiply, kept with the value
    widen = None
    if (len(v_load) == 1 and len(rest) == 3 and _is(rest[0], CONVERT_OP, (v_load[0].dst,))
            and rest[0].dtype == "float32"):
        widen, rest = rest[0], rest[1:]
    v_value = widen.dst if widen is not None else (v_load[0].dst if len(v_load) == 1 else None)
    if not (len(probs_load) == 1 and len(v_load) == 1 and len(rest) == 2 and _is(rest[0], "multiply")
            and set(rest[0].args) == {probs_load[0].dst, v_value} and isinstance(rest[1], Accumulate)
            and rest[1].reduction == "sum" and rest[1].value == rest[0].dst):
        return "its P @ V phase is not a sum of probabilities times values"
    value = v_load[0]
    if key not in set().union(*(free_vars(e) for e in value.index)) or value.pad is not None:
        return "its values are not read by key"
    store = o_body[-1]
    if not isinstance(store, Store) or any(isinstance(s, (Loop, Store, Accumulate)) for s in o_body[1:-1]):
        return "its P @ V phase does not end with the output's store"
    if any(free_vars(e) - row_vars - {o_ph.var} for e in store.index):
        return "its output is not stored per row and column"
    return AttentionParts(rows, key, keys, score, x, zero_if, zero_cond, running_max, o_ph.var, o_ph.extent,
                          value, tuple(o_body[1:-1]), rest[1].acc, store, scores_local, probs_local, prologue,
                          widen)


def _read_scores(body, local: str, value) -> tuple[list, dict]:
    """The max phase's statements with `load scores[...]` replaced by the score itself, and
    the names those loads had (-> the score)."""
    out = []
    alias = {}
    for s in body:
        if isinstance(s, Load) and s.tensor == local:
            alias[s.dst] = value
            continue
        if isinstance(s, Compute):
            s = Compute(s.dst, s.op, tuple(alias.get(a, a) if isinstance(a, str) else a for a in s.args), s.note,
                        s.dtype)
        out.append(s)
    return out, alias


def _is(s, op: str, args: tuple | None = None) -> bool:
    if not (isinstance(s, Compute) and s.op == op):
        return False
    return args is None or all(a is None or a == b for a, b in zip(args, s.args))


def index_uses(index: tuple[Affine, ...]) -> frozenset[str]:
    return frozenset().union(*(free_vars(e) for e in index)) if index else frozenset()
