"""Shared-memory bank conflicts, counted on Tile IR (used by 009 and 014, and by tests).

Shared memory is 32 banks of 4-byte words: word w lives in bank w % 32. The 32 lanes of a
warp issue a load together; lanes that read the same word share one broadcast, but distinct
words that fall into one bank are served one after another. The *conflict degree* of one
warp-wide access is the largest number of distinct words any single bank must serve: 1 is
conflict-free, d means the load takes d wavefronts instead of one.

    conflict_degree([0, 1, 2, ..., 31])          -> 1    consecutive floats
    conflict_degree([0, 16, 32, 48, ...])        -> 16   a column of a 16-wide row-major tile
    conflict_degree([0, 17, 34, 51, ...])        -> 1    the same column with rows padded to 17

On Tile IR, a Load from a Stage reads word `flat(index)` of the stage's shared array (rows
of the innermost slab axis are `extent + pad` floats long), XOR-swizzled where 012 stamped
a swizzle on a TMA stage (deplokit.ir.swizzle). Its warps are the THREAD axes
flattened row-major (the last axis fastest); loop variables are uniform across a warp, so
they only shift every lane's word by the same amount, which leaves the degree unchanged:
they are taken at 0. Register-loop variables are uniform too, but 009 may skew a register
slot by the thread index, so every register slot is counted separately: the cost of a load
is the sum of its warp-worst degrees over the slots of the register block (the wavefronts
one execution of the unrolled register nest needs), and load_degree reports the worst slot.
A strided loop's variable starts at its thread's lane, and is taken there.

A load in a vector loop (005: 4 consecutive floats per thread) is as wide as the schedule
stamped it (Load.shared_width, which the lowering reads too). Stamped 4, it is one 128-bit
access per lane: the hardware serves a warp's float4 loads in 4 phases of 8 lanes (128 bytes
each; w-float accesses in phases of 32 / w lanes), so its degree is the worst phase's, over
the 4 words each of its 8 lanes reads; 4 lanes reading 4 consecutive floats each are
conflict-free. Stamped 1 (rows off the 16-byte grid), it is spelled lane by lane: one
warp-wide 4-byte load per value of the vector variable, each priced and summed like a
register slot. Four register slots in a row (the
innermost register loop's r = 4q .. 4q+3) whose lanes each read 4 consecutive, 16-byte
aligned words (008's `quads` layout) are one such float4 access: nvcc merges them into an
LDS.128 once the register nest is unrolled, so they are priced as one.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..ir.fragments import element_lanes, ldmatrix_row_lanes
from ..ir.index import Gather, evaluate, free_vars
from ..ir.loop_ir import Load, Loop
from ..ir.swizzle import swizzle_word
from ..ir.tile_ir import THREAD, Stage, StridedLoop, Tile, TileKernel, walk
from ..ir.tile_mma import FragmentLoad
from ..target import WARP_SIZE

BANKS = 32
WARP = WARP_SIZE


def conflict_degree(addresses) -> int:
    """Wavefronts one warp-wide access of 4-byte words at `addresses` (one per active lane;
    None for an inactive lane) needs: the most distinct words in one bank; 0 when no lane is
    active."""
    per_bank: dict[int, set] = {}
    for a in addresses:
        if a is None:
            continue
        per_bank.setdefault(int(a) % BANKS, set()).add(int(a))
    return max((len(words) for words in per_bank.values()), default=0)


@dataclass(frozen=True)
class SmemLoad:
    """One Load from a Stage, with what its warps cost."""
    stage: str
    dst: str
    degree: int          # worst warp, worst register slot
    wavefronts: int      # summed over the register slots (worst warp each), and over the lanes
                         # of a vector loop whose load is spelled lane by lane
    slots: int           # register slots the load runs for (1 outside register loops)


def thread_values(tile: Tile) -> dict[str, np.ndarray]:
    """Each THREAD axis's value for every thread of the block, in thread-index order."""
    axes = [a for a in tile.axes if a.kind == THREAD]
    total = 1
    for a in axes:
        total *= a.extent
    tid = np.arange(total, dtype=np.int64)
    out, stride = {}, 1
    for a in reversed(axes):
        out[a.var] = (tid // stride) % a.extent
        stride *= a.extent
    return out


def stage_word(stage: Stage, index_values, swizzle: int | None = None) -> np.ndarray:
    """The shared-array word each lane reads, for slab coordinates `index_values`: row-major
    with padded rows, then XOR-swizzled as a TMA box written with `swizzle` bytes is
    (default: the stage's own swizzle)."""
    pad = stage.pad
    if swizzle is None:
        swizzle = stage.tma.swizzle if stage.tma else 0
    shape = [ax.extent for ax in stage.slab]
    shape[-1] += pad
    word, stride = np.int64(0), 1
    for v, extent in zip(reversed(index_values), reversed(shape)):
        word = word + v * stride
        stride *= extent
    if stage.element_bytes != 4:        # a half stage: the 4-byte word its element sits in
        word = word * stage.element_bytes // 4
    return swizzle_word(word, swizzle)


def _warp_worst(words: np.ndarray, threads: int, width: int = 1) -> int:
    """The worst warp's degree; `width` 4: float4 accesses, served a phase of 8 lanes at a time."""
    words = np.broadcast_to(words, (threads,))
    if width == 1:
        return max(conflict_degree(words[w:w + WARP]) for w in range(0, threads, WARP))
    phase = WARP // width
    runs = (words[:, None] + np.arange(width)).reshape(threads, width)
    return max(conflict_degree(runs[p:p + phase].ravel()) for p in range(0, threads, phase))


def smem_loads(kernel: TileKernel, swizzles: dict[str, int] | None = None) -> list[SmemLoad]:
    """Every Load from a Stage of the kernel, with its bank-conflict degree. `swizzles` (stage
    name -> swizzle bytes) prices a swizzle other than the one the stages hold (a swizzle
    permutes 16-byte chunks, so the loads' stamped widths still hold; another pad is priced on
    a kernel padded and restamped, as 014 does)."""
    tile = kernel.tile()
    stages = {s.name: s for s, _ in walk(tile.body) if isinstance(s, Stage)}
    lanes = thread_values(tile)
    threads = len(next(iter(lanes.values()))) if lanes else 1
    out = []
    for s, loops in walk(tile.body):
        if isinstance(s, FragmentLoad) and s.stage in stages and kernel.mma is not None:
            out.append(_fragment_cost(kernel.mma, s, stages[s.stage], tile, loops, lanes, threads, swizzles))
            continue
        if not isinstance(s, Load) or s.tensor not in stages:
            continue
        if any(isinstance(a, Gather) for e in s.index for a, _ in e.terms):
            continue                                   # data-dependent: not static
        stage = stages[s.tensor]
        env: dict = {v: np.int64(0) for a in tile.axes for v in [a.var] if a.var not in lanes}
        env.update(lanes)
        registers, width = [], 1
        for lp in loops:
            if isinstance(lp, Loop) and lp.kind == "vector" and any(lp.var in free_vars(e) for e in s.index):
                if s.shared_width > 1:
                    width = s.shared_width             # one access: taken at 0, the run's first word
                    env[lp.var] = np.int64(0)
                else:
                    registers.append(lp)               # spelled lane by lane: one scalar load per lane
            elif isinstance(lp, Loop) and lp.kind == "register":
                registers.append(lp)
            elif isinstance(lp, Loop):
                env[lp.var] = np.int64(0)
            elif isinstance(lp, StridedLoop):
                env[lp.var] = evaluate(lp.start, _defaulted(env, lp.start))
        words = []
        for values in itertools.product(*(range(lp.extent) for lp in registers)):
            env.update({lp.var: np.int64(v) for lp, v in zip(registers, values)})
            idx = [evaluate(e, _defaulted(env, e)) for e in s.index]
            swz = None if swizzles is None else swizzles.get(stage.name)
            words.append(np.broadcast_to(stage_word(stage, idx, swizzle=swz), (threads,)))
        worst, total = 0, 0
        for run, w in _accesses(words, registers, width):
            d = _warp_worst(run, threads, w)
            worst, total = max(worst, d), total + d
        slots = len(words) // math.prod(lp.extent for lp in registers if lp.kind == "vector")
        out.append(SmemLoad(stage.name, s.dst, worst, total, slots))
    return out


def _fragment_cost(st, s: FragmentLoad, stage: Stage, tile, loops, lanes, threads, swizzles) -> SmemLoad:
    """A tensor-core fragment load: an ldmatrix is a 16-byte row per lane, 8 lanes (one matrix)
    a phase, as a float4 is; an lds path reads one word per lane per element."""
    env: dict = {v: np.int64(0) for a in tile.axes for v in [a.var] if a.var not in lanes}
    env.update(lanes)
    registers = [lp for lp in loops if isinstance(lp, Loop) and lp.kind == "register"]
    env.update({lp.var: np.int64(0) for lp in loops if isinstance(lp, Loop) and lp.kind != "register"})
    g, t = st.lanes
    lane = np.asarray(lanes[g]) * 4 + np.asarray(lanes[t])
    lay = st.layout(s.operand)
    if s.via.startswith("ldmatrix"):
        along_cols = "fc" in free_vars(s.at[-1])
        tables, width = [ldmatrix_row_lanes(lay, along_cols, s.tiles)], 4
    else:
        tables, width = [element_lanes(lay, i) for i in range(len(lay.coords[0]))], 1
    swz = None if swizzles is None else swizzles.get(stage.name)
    worst, total, slots = 0, 0, 0
    for values in itertools.product(*(range(lp.extent) for lp in registers)):
        env.update({lp.var: np.int64(v) for lp, v in zip(registers, values)})
        slots += 1
        for rows, cols in tables:
            env.update(fr=np.asarray(rows)[lane], fc=np.asarray(cols)[lane])
            idx = [evaluate(e, _defaulted(env, e)) for e in s.at]
            d = _warp_worst(np.broadcast_to(stage_word(stage, idx, swizzle=swz), (threads,)), threads, width)
            worst, total = max(worst, d), total + d
    return SmemLoad(stage.name, s.dst, worst, total, slots)


def _accesses(words, registers, width):
    """(first words, width) of each access the slots' loads make: a run of 4 slots of the
    innermost register loop reading 4 consecutive aligned words per lane is one float4."""
    inner = registers[-1].extent if registers and registers[-1].kind == "register" else 1
    i = 0
    while i < len(words):
        run = words[i:i + 4]
        if (width == 1 and inner % 4 == 0 and i % 4 == 0 and len(run) == 4 and not (run[0] % 4).any()
                and all((run[j] == run[0] + j).all() for j in range(1, 4))):
            yield run[0], 4
            i += 4
        else:
            yield words[i], width
            i += 1


def _defaulted(env, e):
    """env, with any variable of e it lacks (a block-uniform name) taken at 0."""
    missing = free_vars(e) - env.keys()
    if not missing:
        return env
    return {**env, **{v: np.int64(0) for v in missing}}


def stage_cost(kernel: TileKernel, swizzles: dict[str, int] | None = None) -> dict[str, tuple[int, int]]:
    """Stage name -> (worst degree of its loads, wavefronts summed over its loads)."""
    out: dict[str, tuple[int, int]] = {}
    for ld in smem_loads(kernel, swizzles):
        d, w = out.get(ld.stage, (0, 0))
        out[ld.stage] = (max(d, ld.degree), w + ld.wavefronts)
    return out
