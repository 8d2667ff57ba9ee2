"""Flash attention's Tile IR: a block owns a tile of query rows, keys and values stream
through shared memory one tile at a time, and each thread keeps its row's state in registers.

    register q_reg[D]
    register row_out[Dv]
    Tile(axes=(a0g:g=THREAD, a1t:QT=THREAD, a0b:H/g=BLOCK, a1b:S/QT=BLOCK)):
        for a4 in 0..D:  # register                  the thread's query row, read once
            in0 = load q[0, a0b * g + a0g, a1b * QT + a1t, a4]
            q_reg[a4] := in0
        row_max := -inf                              the online softmax's running state
        row_sum := 0
        for a2 in 0..Dv:  # register
            row_out[a2] := 0
        for a3o in 0..T/Tk:  # serial                (causal: StridedLoop from the diagonal)
            k_smem = Stage(k, origin=(0, a0b, a3o * Tk, 0), slab=(a3i:Tk@2, a4:D@3))
            v_smem = Stage(v, ..., slab=(a3i:Tk@2, a5:Dv@3))
            for a3i in 0..Tk:  # serial              one key: every thread of the block reads it
                for a4 in 0..D:  # reduce unroll
                    in0 = load q_reg[a4];  in1 = load k_smem[a3i, a4]  ...
                ... online softmax: row_max := ..., row_sum := ...
                for a5 in 0..Dv:  # register
                    row_out[a5] := row_out[a5] * c + p * v_smem[a3i, a5]

Every key and value tile is read from global memory once per block, for QT x g query rows.
With the causal plan the key-tile loop runs from the query tile's diagonal tile down to tile
0 (StridedLoop's start is an index of the block): the tiles above the diagonal are never
read nor computed, and the diagonal tile is masked by the score's own `where`. Keys past T
in the last tile (T not a multiple of Tk) score -inf. With FlashPlan.rows = 2 a thread owns two
query rows, read from the block's rows staged in shared memory, and the score loop runs
head_dim-outer so that each K and V quad serves both (_rows_tile, docs/flash_hd128.md).
"""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, Var, floordiv, mod, substitute, var
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store, flash_parts
from ...ir.substitute import substitute_body
from ...ir.tile_ir import BLOCK, THREAD, Assign, Combine, RegisterTile, StridedLoop, Tile, TileAxis, TileKernel
from ...target import VECTOR


def flash_tile(kernel: TileKernel) -> TileKernel:
    plan = kernel.flash
    rows, keys, dot, q, k, v = flash_parts(kernel)
    qt, qb = f"{plan.query}t", f"{plan.query}b"
    n_q = -(-rows[-1].extent // plan.query_tile)
    threads, blocks, mapping, ranges = [], [], {}, {}
    for lp in rows:
        if lp.var == plan.query:     # rows > 1: thread qt owns rows qt * rows + r (_rows_tile)
            threads.append(TileAxis(qt, plan.query_tile // plan.rows, THREAD))
            blocks.append(TileAxis(qb, n_q, BLOCK))
            mapping[lp.var] = var(qb) * plan.query_tile + var(qt) * plan.rows
            ranges.update({qt: plan.query_tile // plan.rows, qb: n_q})
        elif lp.var == plan.heads and plan.group > 1:
            hg, hb = f"{lp.var}g", f"{lp.var}b"
            threads.insert(0, TileAxis(hg, plan.group, THREAD))
            blocks.append(TileAxis(hb, lp.extent // plan.group, BLOCK))
            mapping[lp.var] = var(hb) * plan.group + var(hg)
            ranges.update({hg: plan.group, hb: lp.extent // plan.group})
        else:
            blocks.append(TileAxis(lp.var, lp.extent, BLOCK))
            ranges[lp.var] = lp.extent
    lanes = plan.lanes
    lane = f"{dot.var}l"
    if lanes > 1:       # the fastest THREAD axis: a row's threads are neighbours in a warp
        threads.append(TileAxis(lane, lanes, THREAD))
        ranges[lane] = lanes

    def spread(name):   # element name * lanes + lane: the lanes interleave along head_dim
        return var(name) * lanes + var(lane) if lanes > 1 else var(name)

    col_quads = lanes > 1 and [s for s in keys.body if isinstance(s, Loop)][-1].extent % (lanes * VECTOR) == 0

    def spread_cols(name):
        """An output column: with lanes, each lane owns runs of 4 adjacent columns (slot c is
        column (c // 4 * lanes + lane) * 4 + c % 4), so its value loads are 16-byte LDS.128
        (vector_geometry.register_quad_width), not one scalar LDS a column."""
        if not col_quads:
            return spread(name)
        return (floordiv(var(name), VECTOR) * lanes + var(lane)) * VECTOR + mod(var(name), VECTOR)

    for st in rows[-1].body:        # the output-column loops
        if isinstance(st, Loop) and st is not keys:
            mapping[st.var] = spread_cols(st.var)
    tk, n_keys = plan.key_tile, keys.extent
    n_tiles = -(-n_keys // tk)
    ko, ki = f"{keys.var}o", f"{keys.var}i"
    if plan.causal:     # from the diagonal tile (= the query tile) down to tile 0
        r = f"{keys.var}r"
        tile_of = Affine(((Var(r), -1),), n_tiles - 1)
        ranges[r] = n_tiles
    else:
        tile_of = var(ko)
        ranges[ko] = n_tiles
    ranges[ki] = tk
    key_at = tile_of * tk + var(ki)
    scatter = plan.scatter and lanes > 1 and tk % lanes == 0
    own = f"{keys.var}w"        # scatter: a lane's own keys of the tile, lane * tk / lanes + own
    if scatter:
        ranges[own] = tk // lanes
    at = {"key": key_at}        # the key index the score's loads and computes read

    def index(ix, extra=None):
        m = dict(mapping)
        m.update(extra or {})
        return tuple(substitute(e, m, ranges) for e in ix)

    local = {b.name for b in kernel.locals}
    m_name, l_name, o_name = (b.name for b in kernel.locals)
    q_reg = "q_reg"
    d = dot.var
    # the query row into registers, once
    at_d, slot = {d: spread(d)}, var(d)
    per_lane = dot.extent // lanes
    quads = (plan.query_registers or plan.rows > 1) and per_lane % VECTOR == 0 and (per_lane > VECTOR or lanes > 1)
    if quads:       # register slot 4 dq + dv holds element (dq * lanes + lane) * 4 + dv: 16-byte runs
        dq, dv = f"{d}q", f"{d}v"
        ranges.update({dq: per_lane // VECTOR, dv: VECTOR})
        slot = var(dq) * VECTOR + var(dv)
        at_d = {d: (var(dq) * lanes + var(lane)) * VECTOR + var(dv) if lanes > 1 else slot}
    q_row = (Load("q_in", q.tensor, index(q.index, at_d)), Assign(q_reg, "q_in", (slot,)))
    if not plan.query_registers:
        head = []       # read from global in the score, staged by 007
    elif quads and lanes > 1:
        head = [Loop(dq, per_lane // VECTOR, "register", (Loop(dv, VECTOR, "register", q_row),))]
    else:
        head = [Loop(d, per_lane, "register", (Load("q_in", q.tensor, index(q.index, {d: spread(d)})),
                                               Assign(q_reg, "q_in", (var(d),))))]
    col = [s for s in keys.body if isinstance(s, Loop)][-1]
    kj = f"{keys.var}j"
    ranges[kj] = tk
    v_at = index(v.index, {keys.var: tile_of * tk + var(kj), col.var: spread_cols(col.var)})
    alias: dict[str, str] = {}

    def rewrite(body, at_key: bool) -> tuple:
        out = []
        for s in body:
            if isinstance(s, Loop):
                if s is dot:
                    inner = []
                    for t in s.body:
                        if t is q:
                            t = Load(t.dst, q_reg, (slot,)) if plan.query_registers else \
                                Load(t.dst, q.tensor, index(q.index, at_d))
                        elif t is k:
                            t = Load(t.dst, k.tensor, index(k.index, {keys.var: key_at, **at_d}))
                        inner.append(t)
                    out.append(_dot_loop(s.var, per_lane, tuple(inner), ranges, quads))
                    if lanes > 1 and not scatter:   # each lane summed its part of head_dim
                        acc = next(t.acc for t in s.body if isinstance(t, Accumulate))
                        out.append(Combine(acc, "sum", (lane,)))
                elif s is keys:
                    out.append(s)
                else:
                    out.append(Loop(s.var, s.extent // lanes, "register", rewrite(s.body, at_key)))
            elif isinstance(s, Load) and s.tensor in local:
                if s.tensor == o_name:
                    out.append(Load(s.dst, o_name, (s.index[-1],)))
                else:
                    alias[s.dst] = s.tensor
            elif isinstance(s, Load):
                out.append(Load(s.dst, s.tensor, index(s.index, {keys.var: at["key"]} if at_key else None), s.pad))
            elif isinstance(s, Store) and s.tensor in local:
                ix = (s.index[-1],) if s.tensor == o_name else ()
                out.append(Assign(s.tensor, _name(s.value, alias), ix))
            elif isinstance(s, Store):
                out.append(Store(s.tensor, index(s.index), _name(s.value, alias)))
            elif isinstance(s, Compute):
                args = tuple(_name(a, alias) if isinstance(a, str) else
                             (substitute(a, {**mapping, keys.var: at["key"]} if at_key else mapping, ranges)
                              if isinstance(a, Affine) else a) for a in s.args)
                out.append(Compute(s.dst, s.op, args, s.note, s.dtype))
            else:
                out.append(s)
        return tuple(out)

    row_body = rows[-1].body
    if plan.rows > 1:
        at["key"] = tile_of * tk + var(lane) * (tk // lanes) + var(own)     # the score's: a lane's own keys

        def at_row(r, stmts, at_key=False):
            mapping[plan.query] = var(qb) * plan.query_tile + var(qt) * plan.rows + r
            return rewrite(stmts, at_key)

        def dot_at(r):      # the dot product's statements of row r, q and k read at (dq * lanes + lane) * 4 + dv
            mapping[plan.query] = var(qb) * plan.query_tile + var(qt) * plan.rows + r
            key = {keys.var: key_at}
            return tuple(Load(t.dst, t.tensor, index(t.index, {**key, **at_d})) if t is q or t is k else t
                         for t in dot.body)
        body, registers = _rows_tile(plan, keys, dot, k, row_body, at_row, dot_at, at["key"], lane, own, ki, kj,
                                    Load("v_key", v.tensor, v_at), col, (m_name, l_name, o_name))
        loop = StridedLoop(r, Affine(((Var(qb), -1),), n_tiles - 1), n_tiles, 1, "serial", body[1]) \
            if plan.causal else Loop(ko, n_tiles, "serial", body[1])
        tile = Tile(tuple(threads + blocks), body[0] + (loop,) + body[2])
        return dataclasses.replace(kernel, body=(tile,), locals=(), register_tiles=registers)
    before = rewrite(row_body[:row_body.index(keys)], False)
    after = rewrite(row_body[row_body.index(keys) + 1:], False)
    first_local = next(i for i, s in enumerate(keys.body) if isinstance(s, Load) and s.tensor in local)
    x = _score_name(keys.body)
    score = list(rewrite(keys.body[:first_local], True))
    partial = ()
    if scatter:     # the dot products' partials; the rest of the score on a lane's own keys
        at["key"] = tile_of * tk + var(lane) * (tk // lanes) + var(own)
        split = next(i for i, t in enumerate(keys.body[:first_local]) if t is dot)
        acc = next(t.acc for t in dot.body if isinstance(t, Accumulate))
        dot_at = len(rewrite(keys.body[:split], True))
        partial = (score[dot_at],)
        score = [Load("score_own", "s_tile", (var(own),))] + \
            [_renamed(t, acc, "score_own") for t in rewrite(keys.body[:split], True) +
             rewrite(keys.body[split + 1:first_local], True)]
        x = "score_own" if x == acc else x     # scores with no epilogue (unscaled) are the dot products
    if n_keys % tk:     # keys past T in the last tile score -inf
        score += [Compute("key_ok", "less", (at["key"], Affine((), n_keys)), dtype="bool"),
                  Compute("score_ok", "where", ("key_ok", x, float("-inf")), "a key past the last scores -inf")]
        x = "score_ok"
    if scatter:
        tile_body = _scattered_tile(ki, tk, partial, dot, own, lane, lanes, tuple(score), x, m_name, l_name, o_name,
                                    col.var, col.extent // lanes, kj, Load("v_key", v.tensor, v_at))
        after = (Combine(l_name, "sum", (lane,)),) + after     # each lane summed its own keys' p
    else:
        tile_body = _online_tile(ki, tk, tuple(score), x, m_name, l_name, o_name, col.var, col.extent // lanes, kj,
                                 Load("v_key", v.tensor, v_at))
    if plan.causal:
        loop = StridedLoop(r, Affine(((Var(qb), -1),), n_tiles - 1), n_tiles, 1, "serial", tile_body)
    else:       # a runtime bound on the keys (flash-decoding's split: up to the position) -> on the tiles
        stop = None if keys.stop is None else \
            floordiv(substitute(keys.stop, mapping, ranges) + (tk - 1), tk, ranges)
        loop = Loop(ko, n_tiles, "serial", tile_body, stop=stop)
    body = tuple(head) + before + (loop,) + after
    registers = ((RegisterTile(q_reg, (dot.extent // lanes,)),) if plan.query_registers else ()) + \
        (RegisterTile("s_tile", (tk,)), RegisterTile(o_name, (col.extent // lanes,)))
    tile = Tile(tuple(threads + blocks), body)
    return dataclasses.replace(kernel, body=(tile,), locals=(), register_tiles=registers)


def _name(a, alias):
    return alias.get(a, a) if isinstance(a, str) else a


def _score_name(step) -> str:
    """The score: the value the running max is taken of."""
    for s in step:
        if isinstance(s, Compute) and s.op == "maximum":
            return s.args[1]
    raise ValueError("no running max")


def _online_tile(ki, tk, score, x, m_name, l_name, o_name, col, columns, kj, v_load) -> tuple:
    """One key tile of the online softmax: the tile's scores into registers and their max,
    the running sum and output row rescaled once for the new max, then P @ V."""
    cs = f"{col}s"
    scores = Loop(ki, tk, "register", score + (
        Assign("s_tile", x, (var(ki),)),
        Compute("tile_max_k", "maximum", ("tile_max", x)),
        Assign("tile_max", "tile_max_k")))
    rescale = (
        Compute("max_new", "maximum", (m_name, "tile_max"), "the running max, this tile included"),
        Compute("unseen", "equal", ("max_new", float("-inf")), dtype="bool"),
        Compute("max_base", "where", ("unseen", 0.0, "max_new"), "a row of masked keys keeps exp finite"),
        Compute("rescale_d", "subtract", (m_name, "max_base")),
        Compute("rescale", "exp", ("rescale_d",), "what was summed under the old max, rescaled once per tile"),
        Compute("sum_rescaled", "multiply", (l_name, "rescale")),
        Assign(l_name, "sum_rescaled"),
        Loop(cs, columns, "register", (
            Load("out_old", o_name, (var(cs),)),
            Compute("out_rescaled", "multiply", ("out_old", "rescale")),
            Assign(o_name, "out_rescaled", (var(cs),)))))
    pv = Loop(kj, tk, "register", (
        Load("s_key", "s_tile", (var(kj),)),
        Compute("p_d", "subtract", ("s_key", "max_base")),
        Compute("p_key", "exp", ("p_d",)),
        Compute("sum_key", "add", (l_name, "p_key")),
        Assign(l_name, "sum_key"),
        _pv_row(o_name, col, columns, v_load)))
    return (Assign("tile_max", float("-inf")), scores) + rescale + (pv, Assign(m_name, "max_new"))



def _pv_row(o_name, col, columns, v_load) -> Loop:
    """out[col] += p_key * v[key, col] over the row's value columns."""
    return Loop(col, columns, "register", (
        Load("out_acc", o_name, (var(col),)),
        v_load,
        Compute("pv", "multiply", ("p_key", "v_key")),
        Compute("out_new", "add", ("out_acc", "pv")),
        Assign(o_name, "out_new", (var(col),))))

def _renamed(s, old: str, new: str):
    """A score statement reading `new` where it read the dot product `old`."""
    if isinstance(s, Compute):
        return dataclasses.replace(s, args=tuple(new if a == old else a for a in s.args))
    if isinstance(s, (Assign, Store)) and s.value == old:
        return dataclasses.replace(s, value=new)
    return s


def _scattered_tile(ki, tk, partial, dot, own, lane, lanes, score, x, m_name, l_name, o_name, col, columns, kj,
                    v_load) -> tuple:
    """One key tile with the scores scattered over a row's lanes (FlashPlan.scatter): each lane
    sums its part of head_dim for every key of the tile, one transposing Combine leaves each
    lane the full scores of its tk / lanes keys, the max, exp and sum run on those only (the
    tile's max combined over the lanes, each lane's sum a partial until the end), and a
    gather hands every lane the tile's P for P @ V."""
    acc = next(t.acc for t in dot.body if isinstance(t, Accumulate))
    c = tk // lanes
    scores = (Loop(ki, tk, "register", partial + (Assign("s_tile", acc, (var(ki),)),)),
              Combine("s_tile", "sum", (lane,), tk),
              *_own_keys_max(own, c, score, x, lane))
    rescale = _online_tile(ki, tk, (), x, m_name, l_name, o_name, col, columns, kj, v_load)[2:-2]
    probs = _own_probs(own, c, l_name, lane, tk)
    pv = Loop(kj, tk, "register", (
        Load("p_key", "s_tile", (var(kj),)),
        _pv_row(o_name, col, columns, v_load)))
    return (Assign("tile_max", float("-inf")),) + scores + rescale + probs + (pv, Assign(m_name, "max_new"))


def _own_keys_max(own, c, score, x, lane) -> tuple:
    """A lane's own c keys of a scattered tile: each scored (`score` ending in `x`) into
    s_tile, the tile's max over them, then over the row's lanes."""
    return (Loop(own, c, "register", score + (
                Assign("s_tile", x, (var(own),)),
                Compute("tile_max_k", "maximum", ("tile_max", x)),
                Assign("tile_max", "tile_max_k"))),
            Combine("tile_max", "max", (lane,)))


def _own_probs(own, c, l_name, lane, tk) -> tuple:
    """p = exp(s - max) on a lane's own c keys, added to its partial row sum `l_name`; then
    a gather hands every lane of the row the tile's tk probabilities for P @ V."""
    return (Loop(own, c, "register", (
                Load("s_key", "s_tile", (var(own),)),
                Compute("p_d", "subtract", ("s_key", "max_base")),
                Compute("p_key", "exp", ("p_d",)),
                Compute("sum_key", "add", (l_name, "p_key")),
                Assign(l_name, "sum_key"),
                Assign("s_tile", "p_key", (var(own),)))),
            Combine("s_tile", "gather", (lane,), tk))


def _dot_loop(d: str, extent: int, body: tuple, ranges: dict, quads: bool) -> Loop:
    """The score's loop over a thread's part of head_dim. With the query row in registers, 4
    elements at a time: a register loop of 4 inside (d = dq * 4 + dv), whose key loads the
    lowering makes one 16-byte shared read each once 007 stages the key tile
    (vector_geometry.register_quad_width). A row dealt to several lanes gives each lane
    runs of 4 adjacent elements (the loads' indices say which: flash_tile)."""
    if not quads:
        return Loop(d, extent, "reduce", body, unroll=True)
    dq, dv = f"{d}q", f"{d}v"
    ranges.update({dq: extent // VECTOR, dv: VECTOR})
    inner = Loop(dv, VECTOR, "register", substitute_body(body, {d: var(dq) * VECTOR + var(dv)}, ranges))
    return Loop(dq, extent // VECTOR, "reduce", (inner,), unroll=True)


def _rows_tile(plan, keys, dot, k, row_body, at_row, dot_at, own_key, lane, own, ki, kj, v_load, col, state):
    """((before the key loop), a key tile's body, (after it)), register tiles: `plan.rows` query
    rows a thread (FlashPlan.rows), their q read from the block's staged rows (flash_stage.py).
    The score loop is head_dim-outer: each q quad is read once a tile, each K quad serves every
    row, each row's partial scores fold into its own register tile s_acc_r{r}; the softmax of
    each row is the scattered one (_scattered_tile), then P @ V reads each V quad once for every
    row. Row r's names carry the suffix _r{r} (its state, scores and output row)."""
    m_name, l_name, o_name = state
    rows, lanes, tk = plan.rows, plan.lanes, plan.key_tile
    c, cols = tk // lanes, col.extent // lanes
    keys_body = keys.body
    first_local = next(i for i, s in enumerate(keys_body) if isinstance(s, Load) and s.tensor in
                       {m_name, l_name, o_name})
    split = next(i for i, t in enumerate(keys_body[:first_local]) if t is dot)
    acc = next(t.acc for t in dot.body if isinstance(t, Accumulate))
    x0 = _score_name(keys_body)
    # the dot product, head_dim-outer: for each quad of a lane's head_dim, every key of the tile
    dq, dv = f"{dot.var}q", f"{dot.var}v"
    k_dst = next(t.dst for t in dot.body if t is k)
    inner: list = []
    for r in range(rows):
        for t in dot_at(r):
            if isinstance(t, Load) and t.dst == k_dst:
                if r == 0:
                    inner.insert(0, t)
                continue
            if isinstance(t, Accumulate) and t.acc == acc:
                t = Accumulate(f"s_acc_r{r}", t.reduction, f"{t.value}_r{r}", (var(ki),), t.dtype)
                inner.append(t)
                continue
            inner.append(_suffixed(t, r, _defined(dot.body) - {k_dst}))
    dot_loop = Loop(dq, dot.extent // lanes // VECTOR, "reduce", (
        Loop(ki, tk, "register", (Loop(dv, VECTOR, "register", tuple(inner)),)),), unroll=True)

    def per_row(r):
        score = at_row(r, keys_body[:split], True) + at_row(r, keys_body[split + 1:first_local], True)
        score = (Load("score_own", "s_acc", (var(own),)),) + tuple(_renamed(t, acc, "score_own") for t in score)
        x = "score_own" if x0 == acc else x0     # unscaled scores are the dot products
        if keys.extent % tk:     # keys past T in the last tile score -inf
            score += (Compute("key_ok", "less", (own_key, Affine((), keys.extent)), dtype="bool"),
                      Compute("score_ok", "where", ("key_ok", x, float("-inf")), "a key past the last scores -inf"))
            x = "score_ok"
        scores = (Combine("s_acc", "sum", (lane,), tk),
                  *_own_keys_max(own, c, score, x, lane))
        rescale = _online_tile(ki, tk, (), x, m_name, l_name, o_name, col.var, cols, kj, v_load)[2:-2]
        probs = _own_probs(own, c, l_name, lane, tk)
        before = at_row(r, row_body[:row_body.index(keys)])
        after = (Combine(l_name, "sum", (lane,)),) + at_row(r, row_body[row_body.index(keys) + 1:])
        return before, (Assign("tile_max", float("-inf")),) + scores + rescale + probs, after

    parts = [per_row(r) for r in range(rows)]
    names = set().union(*(_defined(p) for p in parts[0])) | {"s_acc", "s_tile", "tile_max", m_name, l_name,
                                                               o_name}
    parts = [tuple(tuple(_suffixed(t, r, names) for t in p) for p in part) for r, part in enumerate(parts)]
    pv_row = [v_load]
    for r in range(rows):
        pv_row += [Load(f"out_acc_r{r}", f"{o_name}_r{r}", (var(col.var),)),
                   Compute(f"pv_r{r}", "multiply", (f"p_key_r{r}", "v_key")),
                   Compute(f"out_new_r{r}", "add", (f"out_acc_r{r}", f"pv_r{r}")),
                   Assign(f"{o_name}_r{r}", f"out_new_r{r}", (var(col.var),))]
    pv = Loop(kj, tk, "register", tuple(Load(f"p_key_r{r}", f"s_tile_r{r}", (var(kj),)) for r in range(rows)) +
              (Loop(col.var, cols, "register", tuple(pv_row)),))
    tile_body = (dot_loop,) + sum((p[1] for p in parts), ()) + (pv,) + \
        tuple(Assign(f"{m_name}_r{r}", f"max_new_r{r}") for r in range(rows))
    registers = tuple(RegisterTile(f"{name}_r{r}", (n,)) for r in range(rows)
                      for name, n in (("s_acc", tk), ("s_tile", tk), (o_name, cols)))
    return (sum((p[0] for p in parts), ()), tile_body, sum((p[2] for p in parts), ())), registers


def _defined(body) -> set[str]:
    """Every name a statement of `body` defines (loads, computes, carried assigns), loops included."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, (Load, Compute)):
            out.add(s.dst)
        elif isinstance(s, Assign):
            out.add(s.dst)
        elif isinstance(s, Loop):
            out |= _defined(s.body)
    return out


def _suffixed(s, r: int, names: set[str]):
    """Statement `s` of query row r: every name in `names` it reads or writes renamed name_r{r}."""
    def n(a):
        return f"{a}_r{r}" if isinstance(a, str) and a in names else a
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=tuple(_suffixed(t, r, names) for t in s.body))
    if isinstance(s, Load):
        return dataclasses.replace(s, dst=n(s.dst), tensor=n(s.tensor))
    if isinstance(s, Compute):
        return dataclasses.replace(s, dst=n(s.dst), args=tuple(n(a) for a in s.args))
    if isinstance(s, Assign):
        return dataclasses.replace(s, dst=n(s.dst), value=n(s.value))
    if isinstance(s, Accumulate):
        return dataclasses.replace(s, acc=n(s.acc), value=n(s.value))
    if isinstance(s, Store):
        return dataclasses.replace(s, value=n(s.value))
    if isinstance(s, Combine):
        return dataclasses.replace(s, acc=n(s.acc))
    return s
