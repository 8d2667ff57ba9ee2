"""Where flash attention's work goes: which rows a block owns, how keys are tiled, and what
that costs in bytes and work (the fusion guard's inputs).

A block owns a tile of query rows and, with grouped-query attention, the query heads that
share one kv head (their keys read `k[.., h // g, ..]`): every key and value tile it stages
serves all of them. Keys come in tiles small enough that a key tile and a value tile fit
in 32 KiB of shared memory. When the mask is causal (`where(key > query, -inf, x)`) and the
query tile equals the key tile, the tiles above the diagonal are skipped.
"""
from __future__ import annotations

import dataclasses

from ...analysis.traffic import loop_kernel_cost, loop_kernel_flops
from ...ir.index import FloorDiv, Gather, Var, free_vars, stride_one, var
from ...ir.loop_ir import Compute, FlashPlan, Kernel, Load, Loop, Store, flash_parts, index_vars, walk
from ...target import VECTOR
from ..fuse.guard import Traffic
from .flash_registers import WARPS_GOAL, budget
from .flash_stage import ROWS_PAD

STAGE_BUDGET = 32 * 1024     # bytes of one key tile and one value tile in shared memory
SHARED_BUDGET = 40 * 1024    # bytes of staged query rows, key tile and value tile
MAX_KEY_TILE = 16     # small tiles: fewer causal pairs computed, the diagonal tile's waste halved
MIN_QUERY_TILE = 16   # rows a block keeps before the query rows go to shared memory instead
MORE_LANES_THREADS = 256   # a block dealt to more lanes for occupancy (_more_lanes) stays this small
# multiply-adds of one key tile a thread's code unrolls (its dot and its output update, over
# its share of head_dim and columns): head_dim 127 (no lanes: odd) at 16 keys unrolled 4064,
# nvcc/NVRTC ran 40 to over 60 s (fuzz seeds 303 case 442, 403 case 351); a smaller key tile
# keeps the code within this (head_dim 64 a lane, 128 over two lanes: 16 keys, as before)
UNROLL_BUDGET = 2048
# the block's query rows staged for two rows a thread (FlashPlan.rows): the suite's 7 heads x 16
# rows at head_dim 128 take 60928 bytes, beside a 2-slot K/V ring of 32 KiB: two blocks an SM
QUERY_ROWS_BYTES = 64 * 1024
FILL_BYTES = 3        # grid fill re-reads K/V at most until the kernel moves 3x its compulsory bytes


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def plan_flash(kernel: Kernel, types, target=None, byte_limit: int | None = None,
               scatter: bool = True, rows_per_thread: int = 2) -> FlashPlan | str:
    """The plan for a flash kernel (attention_loop.py), or why it cannot be scheduled so.
    With a target, registers are estimated for its copies (TMA or cp.async) and the grid is
    filled to its SMs (_fill), never past `byte_limit` bytes moved (the kernels flash
    attention replaces: a fill must not cost it the fusion guard). `scatter`: a row dealt to
    lanes reduces its scores with a transposing Combine where the key tile divides by the lanes
    (FlashPlan.scatter: fewer shuffles, and max / exp / sum on 1/lanes of the keys each).
    `rows_per_thread` (2, or 1: off): a scattered plan takes two query rows a thread where _two_rows says so."""
    sm_count = target.sm_count if target is not None else 0
    tma = target.tma if target is not None else True
    try:
        rows, keys, dot, q, k, v = flash_parts(kernel)
    except (StopIteration, ValueError) as e:
        return f"its online softmax has an unexpected shape ({e or 'missing loop'})"
    col = [s for s in keys.body if isinstance(s, Loop)][-1]
    for load in (q, k, v):
        if any(isinstance(atom, Gather) for e in load.index for atom, _ in e.terms):
            return (f"{load.tensor}[{', '.join(map(str, load.index))}] reads rows chosen by data (a gather): "
                    f"not a tile a stage can copy")
    for load, inner in ((k, dot.var), (v, col.var)):
        for name in (keys.var, inner):
            if sum(name in free_vars(e) for e in load.index) != 1 or not any(stride_one(e, name) for e in load.index):
                return (f"{load.tensor}[{', '.join(map(str, load.index))}] is not a tile of keys x one axis "
                        f"(a stage needs {name} alone in one dimension)")
    query = rows[-1].var if rows else ""
    if query not in index_vars(q.index) or query in index_vars(k.index) or query in index_vars(v.index):
        query = ""          # one query row (decode): the row loops are batch and heads
    heads, group = "", 1
    for lp in rows if not query else rows[:-1]:
        if lp.var not in index_vars(q.index):
            continue
        atoms = [a for e in k.index for a, _ in e.terms]
        if Var(lp.var) in atoms:
            heads, group = lp.var, 1
        elif any(isinstance(a, FloorDiv) and a.expr.terms == ((Var(lp.var), 1),) and a.expr.const == 0
                 for a in atoms):
            g = next(a.divisor for a in atoms if isinstance(a, FloorDiv) and a.expr.terms == ((Var(lp.var), 1),))
            if lp.extent % g == 0 and g <= 32:
                heads, group = lp.var, g
        elif lp.var not in index_vars(k.index) and lp.extent <= 32:   # one kv head for every query head (MQA)
            heads, group = lp.var, lp.extent
    d, dv = dot.extent, [s for s in keys.body if isinstance(s, Loop)][-1].extent
    seq, n_keys = rows[-1].extent if query else 1, keys.extent
    key_tile = min(MAX_KEY_TILE, _pow2_at_most(max(1, STAGE_BUDGET // (4 * (d + dv)))), _pow2_at_least(n_keys))
    causal = bool(query) and _is_causal(keys, query) and seq <= n_keys and group * key_tile <= 1024
    # causal: the query tile is the key tile, so that the diagonal is one tile; otherwise as many
    # rows as 256 threads hold (each key and value tile is read once per query tile)
    query_tile = key_tile if causal else min(_pow2_at_least(seq), max(1, _pow2_at_most(256 // group)), 64)

    def sized(heads_a_block: int, rows: int) -> FlashPlan | str:
        plan = _sized(d, dv, heads_a_block, rows, key_tile, causal, decode=not query, tma=tma)
        if isinstance(plan, str):
            return plan
        plan = dataclasses.replace(plan, query=query, heads=heads, kv_group=0 if heads_a_block == group else group,
                                   scatter=scatter and plan.lanes > 1 and plan.key_tile % plan.lanes == 0)
        two = rows_per_thread > 1 and plan.scatter and query and keys.stop is None
        return _two_rows(plan, d, dv, tma) if two else plan

    plan = sized(group, query_tile)
    if isinstance(plan, str) or not sm_count:
        return plan
    return _fill(kernel, plan, types, sm_count, sized, byte_limit)


def _sized(d, dv, group, query_tile, key_tile, causal, decode, tma=True) -> FlashPlan | str:
    """Rows and lanes for blocks of `group` heads x `query_tile` rows: in registers where a
    thread's fit its cap (_fit_registers), else the block's query rows in shared memory."""
    choice = _fit_registers(d, dv, group, query_tile, key_tile, causal, decode, tma)
    if choice is not None:
        query_tile, key_tile, lanes, why = choice
        query_tile, key_tile, capped = unroll_capped(d, dv, query_tile, key_tile, lanes, causal)
        return FlashPlan("", "", group, query_tile, key_tile, causal, True, lanes, why + capped)
    # no tile fits a thread's registers: the block's query rows in shared memory (a float of
    # padding per row), a whole row a thread
    def fits(qt, kt):
        return 4 * (group * qt * (d + 1) + kt * (d + dv)) <= SHARED_BUDGET
    while not fits(query_tile, key_tile) and query_tile > 1:
        query_tile //= 2
        key_tile = query_tile if causal else key_tile
    if not fits(query_tile, key_tile):
        return f"{group} query rows of {d} floats and a key tile do not fit {SHARED_BUDGET} bytes"
    fit = budget(d, dv, key_tile, 1, group * query_tile, query_in_registers=False, tma=tma)
    if not fit.fits:
        # a thread still keeps its whole output row: past the cap it spills every key tile's
        # update to local memory (head_dim 1000: ~1100 registers); the separate kernels win
        return f"a thread's output row of {dv} floats does not fit its registers even with the query rows " \
            f"in shared memory: {fit.text()}"
    why = "query rows in shared memory: no tile of rows kept a thread's row within its register cap; " + fit.text()
    query_tile, key_tile, capped = unroll_capped(d, dv, query_tile, key_tile, 1, causal)
    return FlashPlan("", "", group, query_tile, key_tile, causal, False, 1, why + capped)


def _two_rows(plan: FlashPlan, d: int, dv: int, tma: bool) -> FlashPlan:
    """The scattered plan with two query rows a thread (FlashPlan.rows) and each row dealt to
    twice the lanes, the same threads a block, where that needs fewer registers: the block's
    query rows go to shared memory (within QUERY_ROWS_BYTES) and every K and V quad a thread
    reads serves both rows, the loads a multiply-add halved (docs/flash_hd128.md), where one row
    leaves the SM under WARPS_GOAL warps and two take fewer registers. Else the plan."""
    lanes = plan.lanes * 2
    if not plan.query_registers or lanes > 32 or d % (VECTOR * lanes) or dv % (VECTOR * lanes) \
            or plan.key_tile % lanes or plan.query_tile % 2:
        return plan
    rows_bytes = 4 * plan.group * plan.query_tile * (d + ROWS_PAD)
    if rows_bytes > QUERY_ROWS_BYTES:
        return plan
    threads = plan.group * plan.query_tile * plan.lanes
    one = budget(d, dv, plan.key_tile, plan.lanes, threads, tma=tma)
    two = budget(d, dv, plan.key_tile, lanes, threads, tma=tma, rows=2)
    # only where one row leaves an SM under WARPS_GOAL warps (head_dim 128 at 2 lanes: 227
    # registers): at 4 lanes and 128 registers, 8 lanes' shuffles cost what the quads save
    if one.warps >= WARPS_GOAL or not two.fits or two.estimate >= one.estimate:
        return plan
    why = (f"2 query rows a thread, {lanes} lanes a row: {two.text()} (1 row, {plan.lanes} lanes: "
           f"{one.estimate}); the block's {plan.group * plan.query_tile} query rows in shared memory "
           f"({rows_bytes} bytes), each K and V quad read once for both rows")
    return dataclasses.replace(plan, rows=2, lanes=lanes, query_registers=False, registers=why)


def unroll_capped(d, dv, query_tile, key_tile, lanes, causal) -> tuple[int, int, str]:
    """(query tile, key tile, why) with the key tile halved while a thread's unrolled key
    tile (key_tile x its d + dv share, flash_tile.py's register loops) exceeds UNROLL_BUDGET
    multiply-adds; a causal plan's query tile stays its key tile (one diagonal tile)."""
    share = -(-(d + dv) // lanes)
    kt = key_tile
    while kt > 1 and kt * share > UNROLL_BUDGET:
        kt //= 2
    if kt == key_tile:
        return query_tile, key_tile, ""
    why = (f"; key tile {kt}: {key_tile} keys x {share} (head_dim + columns a thread) would unroll "
           f"{key_tile * share} multiply-adds, over {UNROLL_BUDGET} (compile time)")
    return (kt if causal else query_tile), kt, why


def _fill(kernel: Kernel, plan: FlashPlan, types, sm_count: int, sized, byte_limit: int | None) -> FlashPlan:
    """While the blocks are fewer than the SMs, the cheapest step (the fewest bytes moved)
    that adds blocks: half the query tile (not causal, whose query tile is its key tile; not
    below MIN_QUERY_TILE rows), or blocks serving the next smaller divisor of the GQA group's
    heads (each sub-group's blocks stage the same K/V tiles again). A step that would move
    more than FILL_BYTES x the compulsory bytes is not taken: K/V re-read that often costs
    more than the idle SMs; nor one over `byte_limit` (the unfused kernels' bytes). One query
    row (decode): twice the key splits is a step too (_more_splits, flash-decoding)."""
    blocks = start = flash_blocks(kernel, plan)
    if blocks >= sm_count:
        return plan
    compulsory = loop_kernel_cost(kernel, types).bytes
    limit = FILL_BYTES * compulsory
    if byte_limit is not None and byte_limit < limit:
        limit, over = byte_limit, f"the {byte_limit} bytes of the kernels it replaces"
    else:
        over = f"{FILL_BYTES}x the compulsory {compulsory}"
    taken, why = [], "no smaller query tile or head group remains"
    while blocks < sm_count:
        steps = []
        more = _more_splits(kernel, plan)
        if more is not None:
            steps.append(more)
        if plan.query and not plan.causal and plan.query_tile // 2 >= MIN_QUERY_TILE:
            steps.append(sized(plan.group, plan.query_tile // 2))
        shared = plan.kv_group or plan.group
        fewer = [g for g in range(plan.group - 1, 0, -1) if shared % g == 0]
        if plan.heads and fewer:
            fewer_heads = sized(fewer[0], plan.query_tile)
            if isinstance(fewer_heads, FlashPlan):    # the keys stay split as they were
                fewer_heads = dataclasses.replace(fewer_heads, splits=plan.splits)
            steps.append(fewer_heads)
        steps = [p for p in steps if isinstance(p, FlashPlan) and flash_blocks(kernel, p) > blocks]
        if not steps:
            break
        best = min(steps, key=lambda p: flash_traffic(kernel, p, types).bytes)
        moved = flash_traffic(kernel, best, types).bytes
        # splitting the keys adds only the partials' bytes (the combine's), never re-reads K/V:
        # bounded by FILL_BYTES x the compulsory bytes alone (fuse_attention weighs its time)
        cap, cap_text = (limit, over) if best.splits == plan.splits else \
            (FILL_BYTES * compulsory, f"{FILL_BYTES}x the compulsory {compulsory}")
        if moved > cap:
            why = f"{_shape(best)} would move {moved} bytes, over {cap_text}"
            break
        plan, blocks = best, flash_blocks(kernel, best)
        taken.append(_shape(plan))
    if blocks >= sm_count:
        text = f"{blocks} blocks to fill {sm_count} SMs ({' then '.join(taken)}; {start} blocks before)"
    else:
        text = f"{blocks} blocks on {sm_count} SMs" + (f" ({' then '.join(taken)})" if taken else "") + \
            f"; not more: {why}"
    return dataclasses.replace(plan, fill=text)


def _shape(plan: FlashPlan) -> str:
    splits = f" x 1/{plan.splits} of the keys" if plan.splits > 1 else ""
    return f"{plan.query_tile} rows x {plan.group} head{'s' if plan.group > 1 else ''}{splits} a block"


def _more_splits(kernel: Kernel, plan: FlashPlan) -> FlashPlan | None:
    """One query row (decode): twice the key splits (flash-decoding, attention_split.py),
    each split a whole number of key tiles; None where the keys do not divide so."""
    if plan.query:
        return None
    n_keys = flash_parts(kernel)[1].extent
    splits = plan.splits * 2
    if n_keys % (plan.key_tile * splits):
        return None
    return dataclasses.replace(plan, splits=splits)


def _fit_registers(d, dv, group, query_tile, key_tile, causal, decode, tma=True):
    """(query tile, key tile, lanes, why) with the largest query tile (the most rows sharing
    each staged K/V tile) and the fewest lanes a row whose thread's registers fit the cap its
    block's thread count implies (flash_registers.py); None when none does. Decode (one query
    row) deals a row to a warp's lanes anyway: a warp is filled and a thread's share is small.
    The tile is not halved below MIN_QUERY_TILE rows: fewer rows re-read K and V too often, and
    staging the query rows in shared memory is the better way out."""
    first = query_tile
    while query_tile >= min(first, MIN_QUERY_TILE):
        kt = query_tile if causal else key_tile
        lanes = 1
        while True:
            threads = group * query_tile * lanes
            fit = budget(d, dv, kt, lanes, threads, tma=tma)
            if fit.fits and not (decode and threads < 32 and _splits(d, dv, lanes)):
                lanes, fit, more = _more_lanes(d, dv, kt, lanes, group * query_tile, fit, tma)
                why = fit.text() + more
                if query_tile < first:
                    wider = budget(d, dv, first if causal else key_tile, lanes, group * first * lanes, tma=tma)
                    why += f" ({first} rows: {wider.text()})"
                return query_tile, kt, lanes, why
            if not _splits(d, dv, lanes) or threads * 2 > 1024:
                break
            lanes *= 2
        query_tile //= 2
    return None


def _more_lanes(d, dv, kt, lanes, rows, fit, tma):
    """(lanes, budget, why) after dealing each row to twice the lanes while its SM keeps fewer
    than WARPS_GOAL warps and the smaller thread share raises them: head_dim 128 two lanes a
    row took 248 registers, 8 warps an SM; four lanes take 128, 16 warps. Blocks stay within
    MORE_LANES_THREADS, where the cap (255) leaves the estimate slack."""
    why = ""
    while fit.warps < WARPS_GOAL and _splits(d, dv, lanes) and rows * lanes * 2 <= MORE_LANES_THREADS:
        wider = budget(d, dv, kt, lanes * 2, rows * lanes * 2, tma=tma)
        if not wider.fits or wider.warps <= fit.warps:
            break
        why += f"; {lanes} lane{'s' if lanes > 1 else ''} a row: {fit.estimate} registers, {fit.warps} warps an SM"
        lanes, fit = lanes * 2, wider
    if why:
        why = f", {fit.warps} warps an SM{why}, under the goal of {WARPS_GOAL}"
    return lanes, fit, why


def _splits(d: int, dv: int, lanes: int) -> bool:
    """A row's head_dim and output columns can be dealt to twice as many lanes."""
    return d % (2 * lanes) == 0 and dv % (2 * lanes) == 0


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _is_causal(keys: Loop, query: str) -> bool:
    """The score is set to -inf where key > query (sdpa's is_causal, top-left aligned)."""
    greater = {s.dst for s in keys.body if isinstance(s, Compute) and s.op == "greater"
               and s.args == (var(keys.var), var(query))}
    return any(isinstance(s, Compute) and s.op == "where" and s.args[0] in greater and s.args[1] == float("-inf")
               for s in keys.body)


def flash_traffic(kernel: Kernel, plan: FlashPlan, types) -> Traffic:
    """Bytes the flash kernel moves: the key and value tensors once per query tile and head
    sub-group (a fraction (n + 1) / 2n of them with causal skipping over n tiles), every other access once per
    element it touches; work as the Loop IR counts it, scaled by the same fraction."""
    rows, keys, dot, q, k, v = flash_parts(kernel)
    extents = {lp.var: lp.extent for s, loops in walk(kernel.body) for lp in loops}
    extents.update({lp.var: lp.extent for lp in rows})
    tiles = -(-rows[-1].extent // plan.query_tile) if plan.query else 1
    kept = (tiles + 1) / (2 * tiles) if plan.causal else 1.0
    local = {b.name for b in kernel.locals}
    total, seen = 0.0, set()
    for s, loops in walk(kernel.body):
        if not isinstance(s, (Load, Store)) or s.tensor in local or (s.tensor, s.index) in seen:
            continue
        seen.add((s.tensor, s.index))
        if s is k or s is v:
            total += types[s.tensor].numel * types[s.tensor].itemsize * tiles * kept * plan.rereads
            continue
        used = index_vars(s.index)
        n = 1
        for name in used:
            n *= extents.get(name, 1)
        total += n * types[s.tensor].itemsize * (kept if keys.var in used else 1.0)
    if plan.splits > 1 and not plan.split:    # the partials: 3 floats a column and split, written and read
        rows_n = 1
        for lp in rows:
            rows_n *= lp.extent
        columns = [s for s in keys.body if isinstance(s, Loop)][-1].extent
        total += 2 * rows_n * plan.splits * (columns + 2) * 4
    return Traffic(int(total), int(loop_kernel_flops(kernel) * kept))


def flash_blocks(kernel: Kernel, plan: FlashPlan) -> int:
    """Blocks the flash kernel launches: one per query tile of each kv-head group (and of
    every other row loop), as flash/flash_tile.py deals them."""
    blocks = 1
    for lp in flash_parts(kernel)[0]:
        if lp.var == plan.query:
            blocks *= -(-lp.extent // plan.query_tile)
        elif lp.var == plan.heads:
            blocks *= lp.extent // plan.group
        else:
            blocks *= lp.extent
    return blocks if plan.split else blocks * plan.splits   # the split kernel has the splits as a loop
