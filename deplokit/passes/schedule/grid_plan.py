"""A skinny matmul's grid, planned whole: split count (003's `splits`), thread shape (005's
`thread_shape`) and register block (008's `tm`, `tn`) chosen together, by what each costs.

A projection at decode or short prefill (M of 1..256 rows, K in the thousands) has too few
output tiles to give every SM a block. Three ways fill the grid, each at a price:

    more splits     every split writes its own M x N partial tile and the reducer reads it
                    back: 2 * S * M * N * 4 workspace bytes next to the N * K * 4 weight bytes
    smaller tiles   a smaller register block issues more shared loads per FFMA
                    (block_shape.loads_per_ffma); a tile shorter than M re-reads the weight
    fewer threads   fewer warps to cover a stage's latency on each SM
    uneven splits   a split count that does not divide the K chunks leaves the rest to the
                    reducer: M * N * leftover * BK products off L2, one thread per output

`plan` (outputs of at most SKINNY_ROWS rows, K of at least 8 x MIN_CHUNKS chunks) prices
every candidate of at least 2 splits (003 splits only a grid its output tiles
cannot fill) from first principles on the target's peaks, and keeps the cheapest of those
that launch at least one block per SM (the cheapest of all when none does):

    dram     (weight + A + output + workspace) bytes / peak bandwidth
    issue    the busiest SM's warp instructions (FFMA, shared loads and K_STEP_OVERHEAD per k
             step) / 4 schedulers, in waves of the blocks an SM holds at once (registers): a
             partial last wave costs a whole one
    latency  a stage's global-load latency once per block on the busiest SM's turn, and
             Little's law: the bytes an SM keeps in flight (the stages 010's default ring
             for a split's chunks fetches ahead, per resident block) over the latency bound
             what it can pull
    reducer  its registers: one float4 per split in flight per thread, so a reducer of many
             splits runs fewer warps (it streams S partials per output: latency-bound, not
             issue-bound, when its resident warps cannot cover LATENCY_CYCLES)

time = max(dram, issue, in-flight limit) + latency. The numbers are lower bounds (peaks,
hardly any bookkeeping): they rank candidates, they do not predict a time (that is the
cost model's, tune/cost_model.py).

Balance (issue 26). A grid whose blocks do not divide evenly over the SMs runs as long as
its busiest SM: 148 blocks on 132 SMs keep 16 SMs on two tiles while 116 idle after one (SM
balance = mean blocks per SM / the busiest SM's = 0.56). Every candidate is ranked first by
whether it keeps the SMs evenly loaded (analysis.occupancy.balanced: balance >= 0.90, or at
least 8 blocks per SM) where that costs at most BALANCE_SLACK more, then by its time (the
busiest SM's issue already prices a partial wave: a balanced grid of smaller tiles or more
splits can cost more than the tail it removes, e.g. N = 5632 = 2^9 x 11 on 132 = 12 x 11
SMs, where power-of-two tiles and dividing splits give 2.67 or 5.33 blocks per SM (0.89) or
at least 10.67 in tiles of a quarter the size; stream-K could balance it: the trace says what
it would deal each SM, `stream_k_words`, and 003 deals them where `stream_k_price` says it
pays, `stream_k_plan`).

`decide` is the default grid of any chunked matmul: the skinny plan above, or, for any
other matmul whose default tiles and split rule leave the SMs unevenly loaded, the cheapest
balanced (tile, split count) over the default thread shapes, register blocks and every split
count (3 or 7 splits balance grids no power of two does: 148 output tiles x 7 = 1036 blocks,
7.85 per SM). 003 takes the decision's split count, 005 its thread shape and 008 its register
block (`decided`); at other knobs 005 and 008 take the plan for that split count and thread
shape: the same argmin over a narrower set, so the three agree whenever the knobs are
defaults.

Split counts. SPLITS runs 1..12 without gaps before the powers of two: an SM count's odd
factors (H100: 132 = 4 x 3 x 11; A100: 108 = 4 x 27) balance tile counts no power of two
does. 24 tiles of 64 x 128 on 108 SMs took 8 splits, 192 blocks (0.89); 9 splits of 22 of
192 K chunks (6 past the end read as zeros) are 216, two an SM (1.00). 9..11
(FACTOR_SPLITS) are tried only where no other count balances the grid, and never in an
mma.sync plan, whose K loop is priced as FFMAs here (split_counts).

On wgmma (sm_90, half operands) a block tile is 008's: 64 rows a warpgroup by an N tile of
8..256, not the register block's. A batch takes `wgmma_plan`: blocks of whole warpgroups and
the N tile 008 will take, priced on the tensor-core rate (`wgmma_price`). So does one matmul
(`_on_warpgroups`) where that plan balances the SMs and the warpgroup tiles 008 would make of
the register-block grid do not, or cost more, or do not exist (008 would fall back to
mma.sync). Where no grid balances, `wgmma_cheapest` (every thread shape, split count and N
tile, the N tile recorded on the plan for 008: GridPlan.n_tile) where it is over
BALANCE_SLACK cheaper and no less balanced, or spreads wider than an mma.sync fallback. A grid
left unevenly loaded says why in 003's trace (`_unbalanced`, `_kept`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...analysis.occupancy import balanced, sm_balance
from ...analysis.work import SPLIT_TAIL_ROUND_TRIPS
from ...ir.fragments import M16N8K16_BF16, WARPGROUP
from ...ir.loop_ir import Loop
from ...ir.stream_k import StreamKPlan
from ...ir.tile_ir import BLOCK, THREAD, walk
from ..mma.mma_tile import ldsm_per_mma
from .block_shape import (
    EXTENTS,
    MAX_DEFAULT_SIDE,
    MIN_DEFAULT_THREADS,
    THREAD_SHAPES,
    blocks_of,
    default_extent,
    default_extents,
    default_thread_shape,
    fitted_threads,
    loads_per_ffma,
    parse_shape,
)

SPLITS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 32, 48, 64)
FACTOR_SPLITS = (9, 10, 11)  # for an SM count's odd factors; not in an mma.sync plan (split_counts)
FULL_BLOCK = 256           # threads of the blocks the old fill check counts
BALANCE_SLACK = 1.10       # a balanced grid wins if it costs at most this much more
GRID_TARGET = 132          # SMs of an H100, for a target that does not say
SKINNY_ROWS = 256          # outputs of at most two 128-row tiles: the plan's domain; taller ones
                           # fill the SMs with M tiles and keep 003's simple rule
MIN_CHUNKS = 4             # K chunks a split reduces at least: 010's ring and 015's prologue
SHORT_CHUNKS = 2           # ... or, where no split of MIN_CHUNKS fills the SMs, at least this
LATENCY_CYCLES = 800       # a global -> shared copy, issue to arrival (the cost model's figure)
K_STEP_OVERHEAD = 2        # issue slots per k step besides FFMA and shared loads (index and loop
                           # bookkeeping: sm_90 SASS of a 4 x 4 block's K loop issues 327 per 16
                           # k steps = 16 FFMA + 2 LDS.128 + ~2.4 others)
L2_RATIO = 3.0             # L2 bandwidth over DRAM's (the cost model's l2_bandwidth_ratio)
REG_FILE = 65536           # 32-bit registers per SM (every target deplokit knows)
WORD = 4                   # bytes of a float32


@dataclass(frozen=True)
class GridPlan:
    shape: str                   # 005's thread_shape (a THREAD_SHAPES entry)
    threads: tuple[int, int]     # threads along M, N (blockify's fitted counts)
    regs: tuple[int, int]        # outputs per thread along M, N
    splits: int
    blocks: int                  # of the split kernel
    us: float                    # the ranking's time (a lower bound, see the module)
    workspace_bytes: int
    n_tile: int = 0              # wgmma's N tile, where the plan chose it (008 takes it); 0: 008's rule


def ring_stages(extent: int, fits=lambda n: True) -> int:
    """010's default ring for a K loop of `extent` iterations: 4 stages, or 3, when the loop
    runs at least 4 times as many iterations (the prologue fills N - 1 tiles before the first
    compute) and `fits(n)` (shared memory); else 2. 015 prefetches N - 1 of them."""
    for n in (4, 3):
        if extent >= 4 * n and fits(n):
            return n
    return 2


def sm_count(target) -> int:
    return getattr(target, "sm_count", 0) or GRID_TARGET


def plan(m: int, n: int, chunks: int, bk: int, target, other: int = 1, splits: int | None = None,
         threads: tuple[int, int] | None = None, fed: bool = False) -> GridPlan | None:
    """The cheapest grid for an m x n output (times `other` batch tiles) over `chunks` K chunks
    of `bk`, among those with `splits` (else any of SPLITS from 2 up that leave each split
    MIN_CHUNKS chunks; SHORT_CHUNKS when only those fill the SMs: a K too short for the
    outputs, M = 1 x N = 256 x K = 512) and `threads` (else the default thread shapes); None
    when no split count fits, M is over SKINNY_ROWS or K too short to be worth planning."""
    if m > SKINNY_ROWS or not worth_filling(chunks):
        return None
    if splits:
        return _cheapest(m, n, chunks, bk, target, other, (splits,), threads, fed)
    return with_factor_splits(lambda factor: _plan_over(m, n, chunks, bk, target, other, threads, fed, factor),
                              sm_count(target), allowed=not fed)


def _plan_over(m, n, chunks, bk, target, other, threads, fed: bool, factor: bool) -> GridPlan | None:
    """plan's choice among split_counts(..., factor)."""
    sms = sm_count(target)
    best = _cheapest(m, n, chunks, bk, target, other, split_counts(chunks, MIN_CHUNKS, factor=factor), threads, fed)
    if best is None or (best.blocks >= sms and balanced(best.blocks, sms)):
        return best
    short = _cheapest(m, n, chunks, bk, target, other, split_counts(chunks, SHORT_CHUNKS, factor=factor), threads,
                      fed)
    if best.blocks < sms:
        return short if short.blocks >= sms else best
    # shorter splits where only they balance: 48 x 16 over K = 2048 is 144 blocks (0.55) of 6
    # tiles x 24 splits, 384 (0.97) of 6 x 64
    return short if balanced(short.blocks, sms) else best


def worth_filling(chunks: int) -> bool:
    """Whether a K of `chunks` chunks is long enough to plan for: 8 splits of MIN_CHUNKS (K =
    512 in chunks of 16). A shorter K loop is a few latencies long in any split, more blocks buy
    little, and 003 keeps its simple rule (the fewest dividing splits that fill the SMs with
    005's and 008's default tiles)."""
    return chunks >= 8 * MIN_CHUNKS


POW2_SPLITS = (2, 4, 8, 16, 32, 64)   # the counts whose leftover chunks the reducer may take


def split_run(chunks: int, splits: int) -> tuple[int, int]:
    """(K chunks each split runs, chunks past the end the last one runs as zeros). A power of
    two runs chunks // splits and leaves the rest to the reducer; any other count that does
    not divide the chunks overhangs: ceil(chunks / splits) each, the loads past K reading
    zeros (N = 5632 at 32 rows: 44 tiles x 3 splits of 43 of 128 chunks, 132 blocks, where no
    count with a factor 3 divides 128)."""
    if splits in POW2_SPLITS or chunks % splits == 0:
        return chunks // splits, 0
    run = -(-chunks // splits)
    return run, splits * run - chunks


def split_counts(chunks: int, least: int, dividing: bool = False, factor: bool = False) -> tuple[int, ...]:
    """The split counts of SPLITS (2 up) that leave each split at least `least` of `chunks`
    (`dividing`: only those that divide them; else a power of two leaves the rest to the
    reducer). A count that is not a power of two and does not divide the chunks overhangs
    (split_run): every split runs ceil(chunks / splits), the last one's past K as zeros; a
    leftover run is the reducer's only for powers of two (one thread an output walking it off
    L2: qwen down_proj at 128 rows, 7 splits of 1184 chunks had a 127 µs reducer).
    FACTOR_SPLITS only with `factor`: the planners try them only where no other count balances
    the grid, and never for mma.sync. Offered everywhere, the ranking took 11 splits for grids
    that were balanced already (64 x 1536 over K 1536 on sm_90: 384 blocks became 132 and a
    reducer kernel, 1.15x by the cost model), and, pricing an mma.sync K loop as FFMAs, 9 or
    10 splits of larger register blocks on sm_80 (128 x 1536 over K 8960 in bf16: 216 blocks
    of 128 x 128, 1.39x the 192 of 64 x 128)."""
    return tuple(s for s in SPLITS[1:] if chunks // s >= least and not (dividing and chunks % s)
                 and (factor or s not in FACTOR_SPLITS))


def with_factor_splits(search, sms: int, allowed: bool = True) -> GridPlan | None:
    """`search(factor)` (a planner over split_counts(..., factor)) without FACTOR_SPLITS, or
    with them where that grid is missing or leaves the SMs unevenly loaded and theirs does not
    (`allowed`: False for an mma.sync plan, which never takes them)."""
    best = search(False)
    if not allowed or (best is not None and balanced(best.blocks, sms)):
        return best
    wider = search(True)
    return wider if wider is not None and balanced(wider.blocks, sms) else best


def _cheapest(m, n, chunks, bk, target, other, counts, threads, fed: bool = False) -> GridPlan | None:
    """The cheapest candidate; the cheapest balanced one instead where it costs at most
    BALANCE_SLACK times as much (the ranking's lower bounds miss what an idle SM costs)."""
    best, even = _best_two(m, n, chunks, bk, target, other, counts, threads, fed)
    return even if even is not None and even.us <= BALANCE_SLACK * best.us else best


def _best_two(m, n, chunks, bk, target, other, counts, threads, fed: bool = False):
    """(the cheapest candidate, the cheapest balanced one filling the SMs with a register
    block at least as large, or None). Balance may not shrink the register block: this
    ranking prices a 4 x 4 block's K loop ~12% over an 8 x 8's per FFMA, the cost model
    (from the Kernel IR nvcc compiles) ~1.6x (qwen gate_proj at 32 rows: 185 vs 114 µs).
    `fed` (mma.sync): only block tiles whose warps are fed (mma_fed), where any such tile fits; blocks of
    LEAST_THREADS threads where no larger one balances (a 64 x 32 tile as two warps of 32 x 32,
    not four of 32 x 16)."""
    if fed:
        # fed warps; else warps of whole 16 x 8 tiles, which mma.sync still runs (a 16-row
        # output has no fed tile: 16 x 192 over K 576 took a 16 x 16 tile of 4 warps, FMA)
        for unit in ("fed", "whole"):
            pair = _best_pair(m, n, chunks, bk, target, other, counts, threads, unit=unit)
            if pair[1] is None:
                fewer = _best_pair(m, n, chunks, bk, target, other, counts, threads, unit=unit, least=LEAST_THREADS)
                pair = fewer if fewer[1] is not None else pair
            if pair[0] is not None:
                return pair
    return _best_pair(m, n, chunks, bk, target, other, counts, threads)


def _best_pair(m, n, chunks, bk, target, other, counts, threads, unit: str = "", least: int = 0):
    """_best_two's pair among block tiles of `unit`: "fed" (mma_fed), "whole" (whole_warp_tiles)
    or any ("")."""
    sms = sm_count(target)
    best, best_key = None, None
    evens = []
    for order, (shape, t) in enumerate(_thread_options(m, n, threads, least)):
        for tm in EXTENTS:
            for tn in EXTENTS:
                if tm > default_extent(m, t[0]) or tn > default_extent(n, t[1]):
                    continue                      # a register block past the axis: padding
                if (unit == "fed" and not mma_fed(t, (tm, tn))) or \
                        (unit == "whole" and not whole_warp_tiles(t, (tm, tn))):
                    continue
                for s in counts:
                    cand = _price(m, n, chunks, bk, target, other, shape, t, (tm, tn), s)
                    key = (cand.blocks < sms, round(cand.us, 4), cand.workspace_bytes, -tm * tn, order)
                    if best_key is None or key < best_key:
                        best, best_key = cand, key
                    if cand.blocks >= sms and balanced(cand.blocks, sms):
                        evens.append((key, cand))
    if best is None:
        return None, None
    least = best.regs[0] * best.regs[1]
    evens = [(key, c) for key, c in evens if c.regs[0] * c.regs[1] >= least]
    return best, min(evens, key=lambda kc: kc[0])[1] if evens else None


def _thread_options(m: int, n: int, threads: tuple[int, int] | None,
                    least: int = 0) -> list[tuple[str, tuple[int, int]]]:
    """(thread_shape, fitted threads) of the default shapes (block_shape.py's rules: at least
    MIN_DEFAULT_THREADS, or `least`); the first shape of each distinct fitted pair."""
    if threads:
        return [(f"{threads[0]}x{threads[1]}", threads)]
    shapes = [
        (s, fitted_threads(parse_shape(s), m, n)) for s in THREAD_SHAPES if max(parse_shape(s)) <= MAX_DEFAULT_SIDE
    ]
    least = min(least or MIN_DEFAULT_THREADS, max(t[0] * t[1] for _, t in shapes))
    out, seen = [], set()
    for s, t in shapes:
        if t[0] * t[1] >= least and t not in seen:
            out.append((s, t))
            seen.add(t)
    return out


def _price(m, n, chunks, bk, target, other, shape, threads, regs, splits) -> GridPlan:
    sms = sm_count(target)
    clock = target.clock_hz                                                            # cycles per second
    bw = target.bandwidth_gbs * 1e9                                                    # bytes per second
    bm, bn = threads[0] * regs[0], threads[1] * regs[1]
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    blocks = other * tiles_m * tiles_n * splits
    k = chunks * bk
    partials = splits * other * m * n * WORD if splits > 1 else 0
    # the weight once from DRAM, re-read through L2 by every M tile (L2 is a few times DRAM's
    # bandwidth: counted at DRAM's, a bound that favours covering M in one tile); the split
    # kernel writes its partials, the reducer reads them back after it
    dram = other * (m * k + n * k * tiles_m) * WORD + partials
    warps = -(-threads[0] * threads[1] // 32)
    resident = _resident_blocks(threads[0] * threads[1], regs, target)
    at_once = min(-(-blocks // sms), resident)   # blocks the busiest SM runs together
    waves = -(-blocks // (sms * resident))       # a partial last wave costs a whole one
    per_sm = waves * at_once                     # blocks the busiest SM runs in all
    run, over = split_run(chunks, splits)
    steps = run * bk
    instr_per_warp = steps * (regs[0] * regs[1] * (1 + loads_per_ffma(regs)) + K_STEP_OVERHEAD)
    issue = max(per_sm * warps * instr_per_warp / 4, waves * instr_per_warp)           # cycles
    stage = (bm + bn) * bk * WORD
    inflight = at_once * stage * (ring_stages(run) - 1)
    # Little's law on the busiest SM: its blocks' bytes over the bytes it keeps in flight (not
    # the average SM's bytes: that credited an uneven grid's second block to every SM, and 144
    # blocks on 132 SMs priced under 132)
    pull = dram / blocks * per_sm * LATENCY_CYCLES / inflight                          # cycles
    main = max(dram / bw, (issue + waves * LATENCY_CYCLES) / clock, pull / clock)
    # chunks past splits x (chunks // splits) are the reducer's: one thread per output walks
    # them, an A and a weight element per product from L2 (priced at DRAM's bandwidth)
    leftover = max(0, chunks - splits * run) * bk * other * m * n * 2 * WORD
    reducer = (
        (partials + leftover + other * m * n * WORD) / bw + _reducer_cycles(splits, other * m * n, target) / clock
        if splits > 1
        else 0.0
    )
    seconds = main + reducer
    workspace = 2 * partials
    return GridPlan(shape, threads, regs, splits, blocks, seconds * 1e6, workspace)


def _resident_blocks(threads: int, regs: tuple[int, int], target) -> int:
    """Blocks an SM holds at once, by registers: a thread keeps its register block, a column
    and a row of operands and ~32 for indices (ptxas's 8 x 8 block: 128)."""
    per_thread = 32 + regs[0] * regs[1] + regs[0] + regs[1]
    by_regs = REG_FILE // (per_thread * threads)
    return max(1, min(by_regs, target.max_threads_per_sm // threads))


def _reducer_cycles(splits: int, outputs: int, target) -> float:
    """The reducer's latency term: each thread streams `splits` float4 partials (one register
    quad each, all in flight), so its registers cap the resident warps; with too few warps
    per SM the loads of one wave do not cover a latency."""
    regs = 24 + 4 * splits
    warps_per_sm = min(target.max_threads_per_sm // 32, REG_FILE // (regs * 32))
    threads = -(-outputs // 4)                               # a float4 of outputs each
    waves = -(-threads // (warps_per_sm * 32 * sm_count(target)))
    return waves * LATENCY_CYCLES


LAUNCH_US = 2.5            # a kernel launch (tune/cost_model.CostConstants.launch_us)
SM_PORT_BYTES = 64         # bytes an SM moves to or from L2 a clock: the bound on one SM's share


def reduce_us(m: int, n: int, other: int, splits: int, tiles: int, target) -> tuple[float, float]:
    """(in-kernel tail, reducer kernel) µs of adding `splits` partials of an m x n output
    (times `other`) cut into `tiles` output tiles (see reduce_choice)."""
    bw = target.bandwidth_gbs * 1e9
    clock = target.clock_hz
    moved = (splits + 1) * other * m * n * WORD
    reducer = LAUNCH_US + (moved / bw + _reducer_cycles(splits, other * m * n, target) / clock) * 1e6
    ports = min(tiles, sm_count(target)) * SM_PORT_BYTES * clock
    tail = (moved / min(bw, ports) + SPLIT_TAIL_ROUND_TRIPS * LATENCY_CYCLES / clock) * 1e6
    return tail, reducer


def reduce_choice(m: int, n: int, other: int, splits: int, tiles: int, target) -> tuple[str, str]:
    """Who adds `splits` partial sums of an m x n output (times `other`) cut into `tiles`
    output tiles, and why: `in_kernel` (the last block of each tile to arrive adds them, then
    applies the epilogue) or `reducer` (a kernel launched after). Both read the S partials and
    write the output once; the reducer pays a launch and its latency waves
    (_reducer_cycles), the in-kernel tail runs on the `tiles` last blocks only, at most one
    SM's port each (SM_PORT_BYTES a clock), after a fence and an atomic (SPLIT_TAIL_ROUND_TRIPS)."""
    tail, reducer = reduce_us(m, n, other, splits, tiles, target)
    if tail <= reducer:
        return "in_kernel", (f"in the kernel: the last of {splits} blocks per tile adds the partials in split order "
                             f"(tail ~{tail:.1f} µs on {tiles} tiles vs a reducer kernel ~{reducer:.1f} µs)")
    return "reducer", (f"reducer: a reducer kernel ~{reducer:.1f} µs vs an in-kernel tail ~{tail:.1f} µs "
                       f"on {tiles} tiles")


@dataclass(frozen=True)
class SplitGeometry:
    """What a matmul Tile says about its grid: output extents per role, batch extent, split
    count (003's BLOCK axis of role K, 1 without) and K chunks (all splits') of `bk`."""
    m: int
    n: int
    other: int
    splits: int
    chunks: int
    bk: int


def split_geometry(kernel) -> SplitGeometry | None:
    """The geometry of a split-K matmul kernel (003 applied), None for any other kernel."""
    if kernel.split_k is None:
        return None
    try:
        tile = kernel.tile()
    except ValueError:
        return None
    splits = [a.extent for a in tile.axes if a.kind == BLOCK and a.role == "K"]
    outer = next((s for s, _ in walk(tile.body) if isinstance(s, Loop) and s.role == "K"
                  and any(isinstance(c, Loop) and c.role == "K" for c in s.body)), None)
    if len(splits) != 1 or outer is None:
        return None
    inner = next(c for c in outer.body if isinstance(c, Loop) and c.role == "K")
    sizes = {"M": 1, "N": 1, "": 1}
    for a in tile.axes:
        if a.kind != BLOCK or a.role != "K":
            sizes[a.role if a.role in ("M", "N") else ""] *= a.extent
    return SplitGeometry(sizes["M"], sizes["N"], sizes[""], splits[0],
                         splits[0] * outer.extent + kernel.split_k.leftover - kernel.split_k.overhang, inner.extent)


def thread_tiles(m: int, n: int, other: int, sms: int) -> float:
    """Blocks blockify and 008's default register block would launch without a split,
    counted in blocks of FULL_BLOCK threads (a grid of 128-thread blocks needs twice as many
    to keep as many warps in flight): 003's check that the output tiles fill the SMs."""
    shape = default_thread_shape(m, n, sms)
    t = parse_shape(shape)
    padded = (t[0] * -(-m // t[0]), t[1] * -(-n // t[1]))
    regs = default_extents(padded[0], padded[1], sms, t)
    blocks = other
    for size, th, r in zip((m, n), t, regs):
        if size > th:
            blocks *= -(-size // (th * r))
    fitted = min(t[0], _pow2(m)) * min(t[1], _pow2(n))
    return blocks * fitted / FULL_BLOCK


def _pow2(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def old_splits(m: int, n: int, chunks: int, other: int, target) -> int:
    """003's rule before balance: 1 when the default tiles fill the SMs; else the skinny
    plan's count, or the fewest dividing splits that fill the SMs with the default tiles."""
    sms = sm_count(target)
    if thread_tiles(m, n, other, sms) >= sms:
        return 1
    fits = split_counts(chunks, MIN_CHUNKS, dividing=True)
    fits = tuple(s for s in fits if s in POW2_SPLITS)
    tiles = thread_tiles(m, n, other, sms)
    return next((s for s in fits if tiles * s >= sms), fits[-1] if fits else 1)


def default_blocks(m: int, n: int, other: int, splits: int, target) -> int:
    """Blocks of the default thread shape and register block (block_shape.py) at `splits`."""
    sms = sm_count(target)
    t = fitted_threads(parse_shape(default_thread_shape(m, n, sms)), m, n)
    return other * splits * blocks_of(m, n, t, default_extents(m, n, sms, t))


@lru_cache(maxsize=4096)
def decide(m: int, n: int, chunks: int, bk: int, target, other: int = 1,
           mma: bool = False, ldsm: bool = False, wgmma: bool = False,
           element_bytes: int = 4) -> tuple[GridPlan | None, str]:
    """The default grid of a chunked m x n matmul (times `other`) over `chunks` K chunks of
    `bk`, and why: the skinny plan where the default tiles leave SMs without a block; else
    None (the default tiles, 003's old split rule) when those keep the SMs evenly loaded;
    else the cheapest balanced grid of tiles and splits (see the module). `mma`: the kernel
    takes tensor cores (008), so a batch's plan keeps block tiles of whole warp tiles; `ldsm`:
    mma.sync reading ldmatrix (LDMATRIX_KINDS), so the grid keeps its warps fed (mma_fed);
    `wgmma` (008's default on sm_90 for half operands): a batch gets wgmma_plan's
    blocks of whole warpgroups, one batch entry a block, wherever one fits, and one matmul
    where _on_warpgroups says; `element_bytes` (2
    for half operands) sizes the 16-byte rows ldmatrix reads (slab_rows_fit)."""
    sms = sm_count(target)
    if wgmma and other == 1:
        return _on_warpgroups(m, n, chunks, bk, target, decide(m, n, chunks, bk, target, 1, mma, ldsm, False,
                                                              element_bytes))
    if thread_tiles(m, n, other, sms) < sms:
        skinny = plan(m, n, chunks, bk, target, other, fed=ldsm)
        if skinny is not None:
            because = "planned to fill the SMs"
            if not balanced(skinny.blocks, sms):
                counts = (skinny.splits,) + split_counts(chunks, SHORT_CHUNKS, factor=not ldsm)
                because += "; " + _unbalanced(m, n, chunks, bk, target, other, counts, ldsm, skinny)
            return skinny, _why(skinny, sms, because, chunks)
    if wgmma and other > 1:
        even = wgmma_plan(m, n, chunks, bk, target, other)
        if even is not None:
            tile = wgmma_block_tile(m, n, even.threads, other * even.splits, sms)
            return even, _why(even, sms, f"a batch of {other} {m}x{n} matmuls on wgmma: blocks of "
                                         f"{tile[0] // WGMMA_ROWS} warpgroup(s) of 64 rows, one batch entry a block",
                              chunks, tile)
    s0 = old_splits(m, n, chunks, other, target)
    if other > 1:
        launched = batched_default_blocks(m, n, other, s0, target)
        if not balanced(launched, sms):
            even = batched_plan(m, n, chunks, bk, target, other, mma, 16 // element_bytes if ldsm else 1)
            if even is None and mma and not default_whole_warps(m, n, target):
                even = batched_plan(m, n, chunks, bk, target, other)   # the default has no mma to keep
            if even is not None and sm_balance(even.blocks, sms) > sm_balance(launched, sms):
                return even, _why(even, sms, f"a batch of {other} {m}x{n} matmuls over {chunks} K chunks: the "
                                             f"default grid of {launched} blocks has SM balance "
                                             f"{sm_balance(launched, sms):.2f}; one batch entry a block", chunks)
    blocks = default_blocks(m, n, other, s0, target)
    # on tensor cores the default's warps must be fed (mma_fed) as well as evenly spread
    fed = not ldsm or other > 1 or default_fed(m, n, target)
    if (balanced(blocks, sms) and fed) or blocks < sms or chunks < 2 * MIN_CHUNKS:
        return None, ""          # even already, or too small a grid to fill: 003's old rule
    best = with_factor_splits(lambda factor: _cheapest(m, n, chunks, bk, target, other,
                                                       (1,) + split_counts(chunks, MIN_CHUNKS, factor=factor),
                                                       None, ldsm), sms, allowed=not ldsm)
    if best is None:
        return None, ""
    feeds = not fed and mma_fed(best.threads, best.regs)
    counts = (1,) + split_counts(chunks, MIN_CHUNKS, factor=not ldsm)
    if not feeds and sm_balance(best.blocks, sms) <= sm_balance(blocks, sms):
        return None, (f"the default grid of {blocks} blocks, SM balance {sm_balance(blocks, sms):.2f}, kept: "
                      + _unbalanced(m, n, chunks, bk, target, other, counts, ldsm, best, (blocks, s0)))
    because = f"the default grid of {blocks} blocks has SM balance {sm_balance(blocks, sms):.2f}"
    if ldsm:
        because += "; warps of at most one ldmatrix per two mma.sync"
    if not balanced(best.blocks, sms):
        because += "; " + _unbalanced(m, n, chunks, bk, target, other, counts, ldsm, best)
    return best, _why(best, sms, because, chunks)


def _unbalanced(m, n, chunks, bk, target, other, counts, ldsm: bool, priced: GridPlan,
                kept: tuple[int, int] | None = None) -> str:
    """Why a grid that leaves the SMs unevenly loaded was kept, for the trace: the cheapest
    balanced candidate over `counts` costs more than BALANCE_SLACK times `priced.us` (the
    cheapest grid's price), or none balances (an mma.sync plan is offered no FACTOR_SPLITS);
    then what stream-K would do with the kept grid's (blocks, splits) (`kept`, else `priced`'s)."""
    _, even = _best_two(m, n, chunks, bk, target, other, counts, None, ldsm)
    blocks, splits = kept or (priced.blocks, priced.splits)
    return (f"unbalanced: {_priced_out(even, priced.us, 'no tile and split count balances it')} "
            f"{stream_k_words(blocks // splits, chunks, sm_count(target))}")


def stream_k_plan(tiles: int, chunks: int, sms: int, blocks: int, resident: int = 1 << 10) -> StreamKPlan | None:
    """Stream-K for a grid of `blocks` blocks of `tiles` output tiles over `chunks` K chunks
    that leaves `sms` SMs unevenly loaded: as many workers an SM as the grid had blocks an SM
    (its busiest SM's, ceil(blocks / sms): as many warps in flight), at most the `resident`
    blocks an SM holds at once (every worker in one wave), fewer where each would
    run under MIN_CHUNKS chunks (a ring's worth); None where even one worker an SM would (16
    tiles x 14 K chunks on 132 SMs: 1.7 each, latency-bound on any schedule), or where the
    deal's arithmetic would pass 32-bit ints (StreamKPlan.fits_int32)."""
    per_sm = min(-(-blocks // sms), resident, tiles * chunks // (sms * MIN_CHUNKS))
    plan = StreamKPlan(tiles, chunks, per_sm * sms) if per_sm >= 1 else None
    return plan if plan is not None and plan.fits_int32 else None


def stream_k_price(m: int, n: int, k: int, other: int, element: int, tensor: str, blocks: int, splits: int,
                   plan: StreamKPlan, tile: tuple[int, int], resident: int, target) -> tuple[float, float]:
    """(stream-K, the split grid it deals) µs by a lower bound of each: the busiest SM's
    multiply-adds at the target's rate (tensor cores' for `tensor` inputs, else its SGEMM
    rate) in waves of the `resident` blocks an SM holds at once (a partial last wave takes as
    long as a whole one: its few blocks cannot use the SM alone), against the bytes: the
    operands of `element` bytes and the output from DRAM, and through L2 (L2_RATIO times
    DRAM's bandwidth) the operands again for every block `tile` (rows, columns) of the output
    and each grid's float partials written and read back (a split's S a tile, stream-K's
    segments, W + T at most), over what the SMs that run blocks can pull
    (SM_PORT_BYTES a clock each), plus a latency a wave and the tails' round trips
    (SPLIT_TAIL_ROUND_TRIPS a flush: a worker's every tile). An FP32 grid is issue-bound: an
    idle SM is lost time, and stream-K wins; a half one on tensor cores is memory-bound (a few
    SMs pull HBM's bandwidth), and stream-K's partials only add bytes."""
    sms, clock = sm_count(target), target.clock_hz
    rate = (target.tensor_rate(tensor) if tensor else target.fp32_tflops) * 1e12 / sms     # FLOP/s an SM
    tile_flops = 2 * other * m * n * k / plan.iterations                                   # an iteration's
    tile_bytes = other * m * n * WORD / plan.tiles
    operands = other * (m * k + n * k + m * n) * element
    rereads = other * (m * k * -(-n // tile[1]) + n * k * -(-m // tile[0])) * element

    def price(grid, iterations, partials, flushes):
        per_sm = -(-grid // sms)
        waves = -(-per_sm // resident)
        bw = min(target.bandwidth_gbs * 1e9, min(grid, sms) * SM_PORT_BYTES * clock)
        work = waves * min(per_sm, resident) * iterations * tile_flops / rate
        # the partials are read back by the same kernel soon after they are written: from L2
        memory = max(operands / bw, (rereads + 2 * partials * tile_bytes) / (L2_RATIO * bw))
        return (max(work, memory) + (waves + flushes * SPLIT_TAIL_ROUND_TRIPS) * LATENCY_CYCLES / clock) * 1e6

    split = price(blocks, plan.chunks // splits, splits * plan.tiles if splits > 1 else 0, 1 if splits > 1 else 0)
    dealt = price(plan.workers, plan.trips, plan.workers + plan.tiles, 1 + -(-(plan.trips - 1) // plan.chunks))
    return dealt, split


def block_geometry(m: int, n: int, target, planned: GridPlan | None) -> tuple[tuple[int, int], int]:
    """The block tile (rows, columns) of the grid 005 and 008 will make of an m x n output,
    and the blocks an SM holds at once: the plan's thread shape and register block, else the
    defaults' (residency by registers: _resident_blocks)."""
    if planned is not None:
        threads, regs = planned.threads, planned.regs
    else:
        threads = fitted_threads(parse_shape(default_thread_shape(m, n, sm_count(target))), m, n)
        regs = default_extents(m, n, sm_count(target), threads)
    tile = (threads[0] * regs[0], threads[1] * regs[1])
    return tile, _resident_blocks(threads[0] * threads[1], regs, target)


def stream_k_deal(tiles: int, chunks: int, sms: int) -> float:
    """K chunks stream-K would deal each of `sms` SMs: `tiles` output tiles' `chunks` each, evenly."""
    return tiles * chunks / sms


def stream_k_words(tiles: int, chunks: int, sms: int) -> str:
    """What stream-K makes of an unevenly loaded grid of `tiles` output tiles over `chunks` K
    chunks, for the trace: it could deal the tiles x chunks iterations out evenly (003 takes it
    where it prices cheaper: reduce=stream_k), so the busiest SM runs their mean, where that mean is a ring's
    MIN_CHUNKS chunks at least; a smaller grid is latency-bound on any schedule (16 x 128 over
    K 896 in fp32: 4 tiles x 56 chunks are 1.7 an SM on 132 SMs)."""
    per_sm = stream_k_deal(tiles, chunks, sms)
    words = f"{tiles} tiles x {chunks} K chunks are {per_sm:.1f} an SM"
    if per_sm < MIN_CHUNKS:
        return f"(nor would stream-K: {words}, under {MIN_CHUNKS})"
    return f"(stream-K could deal them evenly: {words})"


def _priced_out(even: GridPlan | None, us: float, none: str) -> str:
    """The trace's words for a balanced grid `even` not taken over one of `us` µs (`none`: the
    words where no grid balances)."""
    if even is None:
        return none
    return f"the cheapest balanced grid ({even.blocks} blocks) prices {even.us / us:.2f}x, over {BALANCE_SLACK}"


def _kept(found: tuple[GridPlan | None, str], why: str) -> tuple[GridPlan | None, str]:
    """`found` with `why` (it was kept though unbalanced) added to its trace words."""
    return found[0], f"{found[1]}; {why}" if found[1] else why


def _on_warpgroups(m: int, n: int, chunks: int, bk: int, target,
                   found: tuple[GridPlan | None, str]) -> tuple[GridPlan | None, str]:
    """One m x n matmul 008 puts on wgmma: `found` (the grid of register-block tiles), unless
    wgmma_plan's grid of warpgroup tiles balances the SMs where the grid 008 makes of `found`
    (wgmma_block_tile) does not, at most BALANCE_SLACK dearer by wgmma_price, or balances them
    too and is cheaper. Where neither balances (a few output tiles over a short K), the cheapest
    grid of any N tile (wgmma_cheapest, else wgmma_plan's) where it is over BALANCE_SLACK
    cheaper and no less balanced, else `found`.
    Qwen2.5-1.5B's k_proj at 128 tokens, 128 x 256 over
    K 1536: 003 planned 8 tiles of 64 x 64 x 4 splits, 008's 128 x 256 tile made that 4
    blocks (SM balance 0.03); now 128 blocks of 64 x 16 in 4 splits (0.97). Llama-3-8B's
    q_proj at 64 tokens: 8 splits of 64 x 256 warpgroup tiles (128 blocks, 8 MB of partials)
    became 128 blocks of 64 x 32 and no split."""
    sms = sm_count(target)
    p = found[0]
    shape = p.shape if p is not None else default_thread_shape(m, n, sms)
    splits = p.splits if p is not None else old_splits(m, n, chunks, 1, target)
    launched = wgmma_price(m, n, chunks, bk, target, 1, shape, splits)
    even = wgmma_plan(m, n, chunks, bk, target)
    if even is None:
        return found             # no warpgroup tile fits the output: mma.sync (or FMA) plans it
    if launched is None:         # 008 would run `found` on mma.sync: no warpgroup tile of its shape
        blocks = p.blocks if p is not None else default_blocks(m, n, 1, splits, target)
        # no price to weigh against here (the mma.sync grid's is the register block's): as in
        # decide, a K loop under 2 x MIN_CHUNKS chunks is too short for splits to pay (64 x
        # 1024 over K 256: 128 blocks of 2 chunks priced 4.8 µs by the cost model, 16 of 4, 3.2)
        if balanced(blocks, sms):
            return found
        cheap = wgmma_cheapest(m, n, chunks, bk, target) if not balanced(even.blocks, sms) else None
        if cheap is not None and chunks >= 2 * MIN_CHUNKS and sm_balance(cheap.blocks, sms) > sm_balance(blocks, sms):
            # no grid balances: the cheapest on wgmma where it spreads wider than 003's on mma.sync
            # (64 x 128 over K 896: 4 blocks of mma.sync became 8 warpgroup tiles of 64 x 16)
            because = (f"on wgmma: 003's grid of {blocks} blocks (SM balance {sm_balance(blocks, sms):.2f}) has no "
                       f"warpgroup tile of its {shape} threads; no grid of warpgroup tiles balances it "
                       + stream_k_words(cheap.blocks // cheap.splits, chunks, sms))
            return cheap, _why(cheap, sms, because, chunks, planned_wgmma_tile(cheap, m, n, sms))
        if not balanced(even.blocks, sms) or chunks < 2 * MIN_CHUNKS:
            return _kept(found, f"{blocks} blocks, SM balance {sm_balance(blocks, sms):.2f}: "
                                + ("no grid of warpgroup tiles balances it" if not balanced(even.blocks, sms) else
                                   f"a K loop of {chunks} chunks, under {2 * MIN_CHUNKS}, keeps 003's grid")
                                + f" {stream_k_words(blocks // splits, chunks, sms)}")
        because = (f"on wgmma: 003's grid of {blocks} blocks (SM balance {sm_balance(blocks, sms):.2f}) has no "
                   f"warpgroup tile of its {shape} threads")
        return even, _why(even, sms, because, chunks, wgmma_block_tile(m, n, even.threads, even.splits, sms))
    was = sm_balance(launched.blocks, sms)
    if balanced(even.blocks, sms) and not balanced(launched.blocks, sms) and even.us <= BALANCE_SLACK * launched.us:
        because = f"on wgmma: 003's grid of {launched.blocks} warpgroup tiles has SM balance {was:.2f}"
    elif even.us < launched.us and balanced(even.blocks, sms):
        because = f"on wgmma: 003's grid of {launched.blocks} warpgroup tiles prices {launched.us / even.us:.2f}x"
    elif balanced(launched.blocks, sms):
        return found
    else:
        # 008's warpgroup tiles of 003's grid leave the SMs unevenly loaded and no balanced grid
        # is within the slack: the cheapest grid of any thread shape, split count and N tile
        # (wgmma_cheapest), where it is over BALANCE_SLACK cheaper and no less balanced (Qwen2.5-0.5B's
        # k_proj at 128 tokens, 128 x 128 over K 896: 003's 2 splits of one 128 x 128 tile, 5.4 µs
        # by wgmma_price, became 16 tiles of 64 x 16, 0.7; 72 x 1792 over K 3520: 42 blocks of 64 x
        # 256 in 3 splits became 56 of 64 x 64 and no split)
        cheaper = [c for c in (wgmma_cheapest(m, n, chunks, bk, target), even)
                   if c is not None and c.us * BALANCE_SLACK < launched.us and sm_balance(c.blocks, sms) >= was]
        # the balanced grid's price against the grid taken (the cheaper one, else 003's)
        even_words = _priced_out(even if balanced(even.blocks, sms) else None,
                                 cheaper[0].us if cheaper else launched.us, "no grid of warpgroup tiles balances it")
        if not cheaper:
            return _kept(found, f"on wgmma 008 makes it {launched.blocks} blocks of warpgroup tiles, SM balance "
                                f"{was:.2f}: {even_words} "
                                + stream_k_words(launched.blocks // launched.splits, chunks, sms))
        cheap = cheaper[0]
        because = (f"on wgmma: 003's grid of {launched.blocks} warpgroup tiles, SM balance {was:.2f}, prices "
                   f"{launched.us / cheap.us:.2f}x this one; {even_words} "
                   + stream_k_words(cheap.blocks // cheap.splits, chunks, sms))
        return cheap, _why(cheap, sms, because, chunks, planned_wgmma_tile(cheap, m, n, sms))
    return even, _why(even, sms, because, chunks, wgmma_block_tile(m, n, even.threads, even.splits, sms))


BATCH_THREADS = 16         # threads 005 gives a batch axis at most (block_threads' leftover)
LEAST_THREADS = 64         # a batched plan's blocks: at least two warps


def batched_default_blocks(m: int, n: int, other: int, splits: int, target, block_threads: int = 256) -> int:
    """Blocks 005 launches for `other` m x n matmuls at the default thread shape and register
    block: a shape of fewer than `block_threads` threads gives the leftover to the batch axis
    (up to BATCH_THREADS), so 32 heads of 32 x 32 at 8 x 16 threads run two heads a block, 16
    blocks."""
    sms = sm_count(target)
    t = fitted_threads(parse_shape(default_thread_shape(m, n, sms)), m, n)
    batch = min(_pow2(other), BATCH_THREADS, max(1, block_threads // (t[0] * t[1])))
    return -(-other // batch) * splits * blocks_of(m, n, t, default_extents(m, n, sms, t))


def default_whole_warps(m: int, n: int, target) -> bool:
    """Whether the default grid of a batch could run on tensor cores: its block tile is whole
    warp tiles (008's conditions, as far as the grid says; batch entries sharing a block keep
    their threads outside the warps, mma_tile.py)."""
    t = fitted_threads(parse_shape(default_thread_shape(m, n, sm_count(target))), m, n)
    return whole_warp_tiles(t, default_extents(m, n, sm_count(target), t))


def batched_plan(m: int, n: int, chunks: int, bk: int, target, other: int, mma: bool = False,
                 row_threads: int = 1) -> GridPlan | None:
    """The cheapest balanced grid of a batch of `other` m x n matmuls (attention's Q @ K^T and
    P @ V: K of 32..512, 28 or 32 heads) over the thread shapes of at least LEAST_THREADS
    threads and at most MAX_DEFAULT_SIDE a side, every register block inside the output and
    the split counts leaving SHORT_CHUNKS chunks a split; each block takes one batch entry
    (005 gives the batch axis no threads: `block_threads` defaults to the plan's). A batch
    count sharing no factor with the SM count balances only by the right tile count: 28 heads
    x 32 tiles = 896 blocks, 6.79 per SM (0.97), where 4 tiles (112) or 16 (448) leave 0.85.
    `mma` (a half or tf32 kernel 008 puts on tensor cores): only block tiles whose warps each
    own whole MMA_TILE tiles, so balance never costs the tensor cores (28 heads of 64 x 64 in
    bf16 kept 28 blocks of mma before a 16 x 8 tile would have lost it), and, for ldmatrix,
    `row_threads` N threads at least (slab_rows_fit). None when no candidate balances."""
    return with_factor_splits(lambda factor: _batched_over(m, n, chunks, bk, target, other, mma, row_threads, factor),
                              sm_count(target), allowed=not mma)


def _batched_over(m, n, chunks, bk, target, other, mma: bool, row_threads: int, factor: bool) -> GridPlan | None:
    """batched_plan's choice among split_counts(..., factor)."""
    sms = sm_count(target)
    best, best_key = None, None
    shapes, seen = [], set()
    for order, s in enumerate(THREAD_SHAPES):
        t = fitted_threads(parse_shape(s), m, n)
        if max(parse_shape(s)) <= MAX_DEFAULT_SIDE and t[0] * t[1] >= LEAST_THREADS and t not in seen:
            shapes.append((order, s, t))
            seen.add(t)
    for order, shape, t in shapes:
        for tm in EXTENTS:
            for tn in EXTENTS:
                if tm > default_extent(m, t[0]) or tn > default_extent(n, t[1]):
                    continue
                if mma and not (whole_warp_tiles(t, (tm, tn)) and slab_rows_fit(t, row_threads)):
                    continue
                for s in (1,) + split_counts(chunks, SHORT_CHUNKS, factor=factor):
                    cand = _price(m, n, chunks, bk, target, other, shape, t, (tm, tn), s)
                    if not balanced(cand.blocks, sms):
                        continue
                    key = (round(cand.us, 4), cand.workspace_bytes, -tm * tn, order)
                    if best_key is None or key < best_key:
                        best, best_key = cand, key
    return best


WGMMA_ROWS = 64            # rows of a warpgroup's wgmma tile (m64nNk16)
WGMMA_NS_TRIED = (256, 128, 64, 32, 16, 8)     # 008 takes the widest N tile that fits


def wgmma_n_tiles(n: int, threads_n: int) -> tuple[int, ...]:
    """The N tiles 008's wgmma path tries for n columns over `threads_n` threads, widest first:
    those of WGMMA_NS_TRIED the N threads divide with no more than half of it padding. The
    8-column tile only where nothing wider fits: a B stored K x N (a @ b) has 16-byte rows
    in it, which no swizzle spans (wgmma_tile.operand_layout), and 008 would fall back to
    a wider, unbalanced tile than the plan counted."""
    padded = threads_n * -(-n // threads_n)
    tiles = tuple(w for w in WGMMA_NS_TRIED if w % threads_n == 0 and (w == 8 or w < 2 * padded))
    return tuple(w for w in tiles if w > 8) or tiles


def wgmma_n_tile(n: int, threads_n: int, rows: int = 0, m: int = 0, blocks_per_tile: int = 1, sms: int = 0) -> int:
    """The N tile 008's wgmma path takes (t008._balanced_n): the widest of wgmma_n_tiles whose
    grid of `rows`-row tiles over m, times `blocks_per_tile` (splits, batch), keeps `sms` SMs
    evenly loaded, else the widest (0: none)."""
    tiles = wgmma_n_tiles(n, threads_n)
    if sms and rows:
        even = [w for w in tiles if balanced(blocks_per_tile * -(-m // rows) * -(-n // w), sms)]
        tiles = tuple(even) or tiles
    return tiles[0] if tiles else 0


def wgmma_plan(m: int, n: int, chunks: int, bk: int, target, other: int = 1) -> GridPlan | None:
    """The grid of `other` m x n half matmuls on wgmma (sm_90): each block one batch entry (the
    batch a BLOCK axis, which wgmma needs: a warpgroup owns 64 rows of one matrix) and whole
    warpgroups (008's conditions: threads a multiple of WARPGROUP, the M threads dividing the
    block's 64-row tiles, the tile no taller than M: a TMA box is no larger than the tensor).
    The block tile is 008's, not the register block's: 64 rows a warpgroup by wgmma_n_tile.
    Ranked by balance (analysis.occupancy.balanced), then wgmma_price, then the fewer operand
    re-reads through L2 (where latency bounds both: 64 x 32 tiles of a 256 x 256 output read
    12 operand rows a K element, 128 x 16 ones 18), then the larger tile.
    None where no shape fits (M under 64, a K loop of one chunk: no ring to stage)."""
    return with_factor_splits(lambda factor: _wgmma_over(m, n, chunks, bk, target, other, factor), sm_count(target))


def _fitted_shapes(m: int, n: int):
    """(order, shape, fitted threads) of each THREAD_SHAPES entry whose fitted threads no
    earlier entry has: the distinct blocks an m x n output can take."""
    seen = set()
    for order, shape in enumerate(THREAD_SHAPES):
        t = fitted_threads(parse_shape(shape), m, n)
        if t not in seen:
            seen.add(t)
            yield order, shape, t


def _wgmma_over(m, n, chunks, bk, target, other: int, factor: bool) -> GridPlan | None:
    """wgmma_plan's choice among split_counts(..., factor)."""
    sms = sm_count(target)
    best, best_key = None, None
    for order, shape, t in _fitted_shapes(m, n):
        for s in (1,) + split_counts(chunks, SHORT_CHUNKS, factor=factor):
            cand = wgmma_price(m, n, chunks, bk, target, other, shape, s)
            if cand is None:
                continue
            tile = wgmma_block_tile(m, n, cand.threads, other * s, sms)
            rereads = m * -(-n // tile[1]) + n * -(-m // tile[0])      # L2 reads of A and B per K element
            key = (not balanced(cand.blocks, sms), round(cand.us, 4), cand.workspace_bytes, rereads,
                   -tile[0] * tile[1], order)
            if best_key is None or key < best_key:
                best, best_key = cand, key
    return best


def wgmma_block_tile(m: int, n: int, threads: tuple[int, int], blocks_per_tile: int = 1,
                     sms: int = 0) -> tuple[int, int]:
    """(rows, columns) of the block tile 008's wgmma path gives `threads` fitted threads: 64
    rows a warpgroup by wgmma_n_tile (balanced over `sms` SMs with `blocks_per_tile` blocks
    an output tile); (0, 0) where it takes none (threads not whole warpgroups, the M threads
    not dividing the rows, a tile taller than M, no N tile)."""
    count = threads[0] * threads[1]
    rows = WGMMA_ROWS * (count // WARPGROUP)
    if count % WARPGROUP or rows % threads[0] or rows > m:
        return 0, 0
    cols = wgmma_n_tile(n, threads[1], rows, m, blocks_per_tile, sms)
    return (rows, cols) if cols else (0, 0)


def wgmma_price(m: int, n: int, chunks: int, bk: int, target, other: int, shape: str,
                splits: int, n_tile: int = 0) -> GridPlan | None:
    """The grid of `shape` (a THREAD_SHAPES entry) and `splits` on wgmma (wgmma_block_tile;
    `n_tile`: that N tile instead of 008's rule, one of wgmma_n_tiles, recorded on the plan),
    priced by a lower bound of its time: DRAM bytes (each operand once), the operands' re-reads
    by every tile through L2 (L2_RATIO times DRAM's bandwidth), the busiest SM's tensor-core
    work at the bf16 rate, a copy latency per wave, a split's reduction (reduce_us: the in-kernel
    tail or the reducer's launch and reads, the cheaper). None where wgmma takes no such
    tile, a split runs one chunk (no K-outer ring for TMA) or leaves chunks to the reducer."""
    t = fitted_threads(parse_shape(shape), m, n)
    sms = sm_count(target)
    rows, cols = wgmma_block_tile(m, n, t, other * splits, sms)
    if n_tile:
        if n_tile not in wgmma_n_tiles(n, t[1]):
            return None
        cols = n_tile
    run, _ = split_run(chunks, splits)
    if not rows or run < 2 or splits * run < chunks:
        return None              # a leftover run would be the reducer's, on FMA: not priced here
    # 008's register-block knobs: a legal tm/tn (the FMA tile's, were wgmma to fall back)
    regs = tuple(max(e for e in EXTENTS if e <= max(1, min(size // th, default_extent(full, th))))
                 for size, th, full in ((rows, t[0], m), (cols, t[1], n)))
    if regs == (1, 1):
        return None
    rate = (target.tensor_rate("bf16") or target.peak_fp32_tflops) * 1e12 / sms     # FLOP/s an SM
    bw = target.bandwidth_gbs * 1e9
    blocks = other * -(-m // rows) * -(-n // cols) * splits
    waves = -(-blocks // sms)
    partials = splits * other * m * n * WORD if splits > 1 else 0
    k = chunks * bk
    dram = other * (m * k + n * k) * 2 + other * m * n * 2 + partials
    # every N tile reads its rows of A again and every M tile the weight, through L2: narrow
    # N tiles that balance a grid pay here (128 x 8 tiles re-read a 128-row A 32 times)
    l2 = other * (m * k * -(-n // cols) + n * k * -(-m // rows)) * 2
    work = waves * 2 * rows * cols * run * bk / rate
    us = (max(dram / bw, l2 / (L2_RATIO * bw), work) + waves * LATENCY_CYCLES / target.clock_hz) * 1e6
    if splits > 1:               # the cheaper of 003's two ways to add the partials (reduce_choice)
        us += min(reduce_us(m, n, other, splits, blocks // splits, target))
    return GridPlan(shape, t, regs, splits, blocks, us, 2 * partials, n_tile)


def planned_wgmma_tile(p: GridPlan, m: int, n: int, sms: int) -> tuple[int, int]:
    """The block tile 008 gives plan `p` of one m x n matmul on wgmma: the plan's N tile where it
    chose one (wgmma_cheapest), else 008's rule (wgmma_block_tile)."""
    rows, cols = wgmma_block_tile(m, n, p.threads, p.splits, sms)
    return (rows, p.n_tile) if p.n_tile else (rows, cols)


def wgmma_cheapest(m: int, n: int, chunks: int, bk: int, target) -> GridPlan | None:
    """The cheapest grid of one m x n matmul on wgmma by wgmma_price over every thread shape,
    split count and N tile (wgmma_n_tiles), balanced or not, its N tile recorded for 008: for an
    output no grid balances within BALANCE_SLACK (_on_warpgroups). Ties: the fewer partials and
    operand re-reads, then the larger tile."""
    best, best_key = None, None
    for order, shape, t in _fitted_shapes(m, n):
        for s in (1,) + split_counts(chunks, SHORT_CHUNKS):
            for cols in wgmma_n_tiles(n, t[1]):
                cand = wgmma_price(m, n, chunks, bk, target, 1, shape, s, cols)
                if cand is None:
                    continue
                rows = WGMMA_ROWS * (t[0] * t[1] // WARPGROUP)
                rereads = m * -(-n // cols) + n * -(-m // rows)
                key = (round(cand.us, 4), cand.workspace_bytes, rereads, -rows * cols, order)
                if best_key is None or key < best_key:
                    best, best_key = cand, key
    return best


MMA_TILE = (16, 8)         # the smallest mma.sync output tile (m16n8): a warp owns whole ones
TENSOR_CORE_PRECISIONS = ("tf32", "bfloat16", "float16")
LDMATRIX_KINDS = ("tf32", "half")   # 008's mma kinds whose warps read fragments by ldmatrix (not wgmma)


def mma_kind(kernel, target) -> str:
    """008's default `mma`: tf32 for a precision='tf32' kernel, half for one whose matmul reads
    half operands (001 stamps both on TileKernel.precision), on sm_80+ (wgmma on sm_90, which
    has it; 008 falls back to mma.sync where it does not fit); else off."""
    precision = getattr(kernel, "precision", "")
    if target.sm < 80 or precision not in TENSOR_CORE_PRECISIONS:
        return "off"
    if precision == "tf32":
        return "tf32"
    return "wgmma" if target.sm == 90 else "half"


def output_extents(tile) -> tuple[dict, int]:
    """Output extents per role (M, N) of the Tile's THREAD axes, and the other axes' product."""
    extents = {"M": 1, "N": 1}
    other = 1
    for a in tile.axes:
        if a.kind != THREAD:
            continue
        if a.role in extents:
            extents[a.role] *= a.extent
        else:
            other *= a.extent
    return extents, other


def tensor_core_output(m: int, n: int, target) -> bool:
    """Whether 008 can put an m x n output on tensor cores at the default thread shape: mma.sync
    and wgmma tile an output split into M and N blocks (mma_tile.py), so an N (or M) that one
    block's threads cover stays on the FMA tile (the Mixtral router's 8 experts). 002's K chunk
    and 003's grid plan for that tile, not for warps 008 will not build."""
    t = fitted_threads(parse_shape(default_thread_shape(m, n, sm_count(target))), m, n)
    return m > t[0] and n > t[1]


def wgmma_output(m: int, n: int, target) -> bool:
    """tensor_core_output with a warpgroup's WGMMA_ROWS rows in M: 002's wide K chunk pays
    only where 008 takes wgmma."""
    return m >= WGMMA_ROWS and tensor_core_output(m, n, target)


def mma_fed(threads: tuple[int, int], regs: tuple[int, int]) -> bool:
    """Whether a block tile of threads x regs on mma.sync reads at most one ldmatrix per two
    mma (issue 25's bar: mma_tile.ldsm_per_mma, its warps over whole 16 x 8 tiles). Four warps
    of 32 x 16 read 3 per 4; two of 32 x 32 (the same 64 x 32 block tile) 4 per 8."""
    count = threads[0] * threads[1]
    if count % 32:
        return False
    ratio = ldsm_per_mma(count // 32, threads[0] * regs[0], threads[1] * regs[1], M16N8K16_BF16)
    return ratio is not None and ratio <= 0.5


def default_fed(m: int, n: int, target) -> bool:
    """mma_fed of the default thread shape and register block (block_shape.py) of m x n."""
    t = fitted_threads(parse_shape(default_thread_shape(m, n, sm_count(target))), m, n)
    return mma_fed(t, default_extents(m, n, sm_count(target), t))


def slab_rows_fit(threads: tuple[int, int], row_threads: int) -> bool:
    """Whether B's slab has rows ldmatrix reads: 008 grows a slab by the register block
    outside its last axis, the N threads, so they must span one 16-byte row (`row_threads`:
    8 halves, 4 floats). The sm_120 bf16 bmm (4, 256, 128) @ (4, 128, 256) balanced on 16 x 4
    threads of 8 x 2 outputs and lost its tensor cores (mma_tile.via: no 16-byte rows)."""
    return threads[1] % row_threads == 0


def whole_warp_tiles(threads: tuple[int, int], regs: tuple[int, int]) -> bool:
    """A block tile of threads x regs whose warps can each own whole MMA_TILE tiles."""
    count = threads[0] * threads[1]
    bm, bn = threads[0] * regs[0], threads[1] * regs[1]
    warps = count // 32
    return (count % 32 == 0 and bm % MMA_TILE[0] == 0 and bn % MMA_TILE[1] == 0
            and (bm // MMA_TILE[0]) * (bn // MMA_TILE[1]) % warps == 0)


def _why(p: GridPlan, sms: int, because: str, chunks: int = 0, tile: tuple[int, int] | None = None) -> str:
    bm, bn = tile or (p.threads[0] * p.regs[0], p.threads[1] * p.regs[1])
    run, over = split_run(chunks, p.splits) if chunks else (0, 0)
    overhang = (f"; {p.splits} splits of {run} of {chunks} K chunks, {over} past the end read as zeros: no "
                f"split count with this factor divides the chunks, every block runs as long") if over else ""
    return (f"grid {p.blocks} blocks ({bm}x{bn} tiles x {p.splits} split{'s' if p.splits > 1 else ''}) on {sms} "
            f"SMs: {p.blocks / sms:.2f} per SM, SM balance {sm_balance(p.blocks, sms):.2f} ({because}{overhang})")


def matmul_geometry(kernel) -> SplitGeometry | None:
    """split_geometry of any chunked matmul kernel, split or not (splits 1 without 003's axis);
    None for any other kernel."""
    if kernel.split_k is not None:
        return split_geometry(kernel)
    try:
        tile = kernel.tile()
    except ValueError:
        return None
    outer = next((s for s, _ in walk(tile.body) if isinstance(s, Loop) and s.role == "K"
                  and any(isinstance(c, Loop) and c.role == "K" for c in s.body)), None)
    if outer is None or not any(a.role in ("M", "N") for a in tile.axes):
        return None
    inner = next(c for c in outer.body if isinstance(c, Loop) and c.role == "K")
    sizes = {"M": 1, "N": 1, "": 1}
    for a in tile.axes:
        sizes[a.role if a.role in ("M", "N") else ""] *= a.extent
    return SplitGeometry(sizes["M"], sizes["N"], sizes[""], 1, outer.extent, inner.extent)


def decided(kernel, target) -> GridPlan | None:
    """`decide`'s grid for a matmul kernel when the kernel has the split count it chose (005
    and 008 read their defaults from it), else None."""
    g = matmul_geometry(kernel)
    if g is None:
        return None
    p, _ = decide_for(kernel, g.m, g.n, g.chunks, g.bk, target, g.other)
    return p if p is not None and p.splits == g.splits else None


def decide_for(kernel, m: int, n: int, chunks: int, bk: int, target, other: int = 1) -> tuple[GridPlan | None, str]:
    """`decide` for a matmul kernel: the unit 008 will give it (mma_kind, where its output can
    take tensor cores, tensor_core_output) sets the flags. 003 plans with it and 005 / 008 read
    their defaults from it, so all three see one decision."""
    kind = mma_kind(kernel, target)
    if not tensor_core_output(m, n, target):
        kind = "off"             # 008 keeps such an output on the FMA tile: plan for that
    found = decide(m, n, chunks, bk, target, other, kind != "off", kind in LDMATRIX_KINDS, kind == "wgmma",
                   4 if kind == "tf32" else 2)
    p = found[0]
    if kind != "off" and p is not None and not whole_warp_tiles(p.threads, p.regs):
        # 008 runs a block tile on tensor cores only where its warps own whole 16 x 8 tiles
        # (wgmma falls back to mma.sync, under 64 rows or where its tile does not fit): plan such
        # blocks (SmolLM2's k_proj, 36 x 192 on sm_90, got 32 x 8 tiles of 4 warps: FMA)
        again = decide(m, n, chunks, bk, target, other, mma=True, ldsm=True, wgmma=False,
                       element_bytes=4 if kind == "tf32" else 2)
        if again[0] is not None and whole_warp_tiles(again[0].threads, again[0].regs):
            return again
    return found
