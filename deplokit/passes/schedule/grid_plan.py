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
cost model's, tune/cost_model.py). 003 takes the plan's split count, 005 the thread shape
that plan gives that split count, 008 the register block for that split and thread shape:
the same argmin over a narrower set, so the three agree whenever the knobs are defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.loop_ir import Loop
from ...ir.tile_ir import BLOCK, walk
from .block_shape import (
    EXTENTS,
    MAX_DEFAULT_SIDE,
    MIN_DEFAULT_THREADS,
    THREAD_SHAPES,
    default_extent,
    fitted_threads,
    loads_per_ffma,
    parse_shape,
)

SPLITS = (1, 2, 4, 8, 16, 32, 64)
GRID_TARGET = 132          # SMs of an H100, for a target that does not say
SKINNY_ROWS = 256          # outputs of at most two 128-row tiles: the plan's domain; taller ones
                           # fill the SMs with M tiles and keep 003's simple rule
MIN_CHUNKS = 4             # K chunks a split reduces at least: 010's ring and 015's prologue
SHORT_CHUNKS = 2           # ... or, where no split of MIN_CHUNKS fills the SMs, at least this
LATENCY_CYCLES = 800       # a global -> shared copy, issue to arrival (the cost model's figure)
K_STEP_OVERHEAD = 2        # issue slots per k step besides FFMA and shared loads (index and loop
                           # bookkeeping: sm_90 SASS of a 4 x 4 block's K loop issues 327 per 16
                           # k steps = 16 FFMA + 2 LDS.128 + ~2.4 others)
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
         threads: tuple[int, int] | None = None) -> GridPlan | None:
    """The cheapest grid for an m x n output (times `other` batch tiles) over `chunks` K chunks
    of `bk`, among those with `splits` (else any of SPLITS from 2 up that leave each split
    MIN_CHUNKS chunks; SHORT_CHUNKS when only those fill the SMs: a K too short for the
    outputs, M = 1 x N = 256 x K = 512) and `threads` (else the default thread shapes); None
    when no split count fits, M is over SKINNY_ROWS or K too short to be worth planning."""
    if m > SKINNY_ROWS or not worth_filling(chunks):
        return None
    if splits:
        return _cheapest(m, n, chunks, bk, target, other, (splits,), threads)
    best = _cheapest(m, n, chunks, bk, target, other, split_counts(chunks, MIN_CHUNKS), threads)
    if best is None or best.blocks >= sm_count(target):
        return best
    short = _cheapest(m, n, chunks, bk, target, other, split_counts(chunks, SHORT_CHUNKS), threads)
    return short if short.blocks >= sm_count(target) else best


def worth_filling(chunks: int) -> bool:
    """Whether a K of `chunks` chunks is long enough to plan for: 8 splits of MIN_CHUNKS (K =
    512 in chunks of 16). A shorter K loop is a few latencies long in any split, more blocks buy
    little, and 003 keeps its simple rule (the fewest dividing splits that fill the SMs with
    005's and 008's default tiles)."""
    return chunks >= 8 * MIN_CHUNKS


def split_counts(chunks: int, least: int, dividing: bool = False) -> tuple[int, ...]:
    """The split counts of SPLITS (2 up) that leave each split at least `least` of `chunks`
    (`dividing`: only those that divide them; else the rest goes to the reducer)."""
    return tuple(s for s in SPLITS[1:] if chunks // s >= least and not (dividing and chunks % s))


def _cheapest(m, n, chunks, bk, target, other, counts, threads) -> GridPlan | None:
    sms = sm_count(target)
    best, best_key = None, None
    for order, (shape, t) in enumerate(_thread_options(m, n, threads)):
        for tm in EXTENTS:
            for tn in EXTENTS:
                if tm > default_extent(m, t[0]) or tn > default_extent(n, t[1]):
                    continue                      # a register block past the axis: padding
                for s in counts:
                    cand = _price(m, n, chunks, bk, target, other, shape, t, (tm, tn), s)
                    key = (cand.blocks < sms, round(cand.us, 4), cand.workspace_bytes, -tm * tn, order)
                    if best_key is None or key < best_key:
                        best, best_key = cand, key
    return best


def _thread_options(m: int, n: int, threads: tuple[int, int] | None) -> list[tuple[str, tuple[int, int]]]:
    """(thread_shape, fitted threads) of the default shapes (block_shape.py's rules); the
    first shape of each distinct fitted pair."""
    if threads:
        return [(f"{threads[0]}x{threads[1]}", threads)]
    shapes = [(s, fitted_threads(parse_shape(s), m, n)) for s in THREAD_SHAPES if max(parse_shape(s)) <= MAX_DEFAULT_SIDE]
    least = min(MIN_DEFAULT_THREADS, max(t[0] * t[1] for _, t in shapes))
    out, seen = [], set()
    for s, t in shapes:
        if t[0] * t[1] >= least and t not in seen:
            out.append((s, t))
            seen.add(t)
    return out


def _price(m, n, chunks, bk, target, other, shape, threads, regs, splits) -> GridPlan:
    sms = sm_count(target)
    clock = target.peak_fp32_tflops * 1e12 / (sms * target.fp32_lanes_per_sm * 2)      # cycles per second
    bw = target.peak_bandwidth_gbs * 1e9                                               # bytes per second
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
    per_sm = -(-blocks // sms)
    waves = -(-blocks // (sms * resident))       # a partial last wave costs a whole one
    per_sm = waves * min(per_sm, resident)
    steps = (chunks // splits) * bk
    instr_per_warp = steps * (regs[0] * regs[1] * (1 + loads_per_ffma(regs)) + K_STEP_OVERHEAD)
    issue = max(per_sm * warps * instr_per_warp / 4, waves * instr_per_warp)           # cycles
    stage = (bm + bn) * bk * WORD
    inflight = min(per_sm, resident) * stage * (ring_stages(chunks // splits) - 1)
    pull = dram / min(blocks, sms) * LATENCY_CYCLES / inflight                         # Little's law, cycles
    main = max(dram / bw, (issue + waves * LATENCY_CYCLES) / clock, pull / clock)
    # chunks past splits x (chunks // splits) are the reducer's: one thread per output walks
    # them, an A and a weight element per product from L2 (priced at DRAM's bandwidth)
    leftover = (chunks % splits) * bk * other * m * n * 2 * WORD
    reducer = (partials + leftover + other * m * n * WORD) / bw + _reducer_cycles(splits, other * m * n, target) / clock \
        if splits > 1 else 0.0
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
                         splits[0] * outer.extent + kernel.split_k.leftover, inner.extent)
