"""What one scheduled kernel does, counted on its Tile IR: the work the cost model prices.

Counts are totals over the whole grid. A statement runs once per value of the loops around
it (a StridedLoop counts stop / step iterations per thread, its average, or from a start that
is an index of the block, its mean over the blocks); a thread-uniform
loop variable is taken at 0. Global accesses are priced by the 32-byte sectors one warp's
access touches (warp 0's lanes, the THREAD axes flattened row-major as the materialiser does):
32 consecutive floats are 4 sectors, a column of a row-major tile up to 32, a broadcast 1.
So coalescing shows up as bytes fetched beyond the bytes asked for. Shared-memory loads are
priced in wavefronts with the bank-degree model of analysis/banks.py; a Stage copy
moves its slab once per block per execution, as whole 32-byte sectors of its rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.fragments import SHAPES as MMA_SHAPES
from ..ir.index import evaluate, free_vars, gathers
from ..ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ..ir.ops import OPS
from ..ir.stages import row_major_strides
from ..ir.stream_k import StreamKPlan, dealt
from ..ir.tile_ir import (
    THREAD,
    AsyncWait,
    Combine,
    FragmentLoad,
    MmaSync,
    SplitArrive,
    Stage,
    StridedLoop,
    TileKernel,
    WarpgroupMma,
)
from .banks import WARP, smem_loads, thread_values
from .units import is_flop

SECTOR = 32
SPLIT_TAIL_ROUND_TRIPS = 3     # an in-kernel split-K tail: the fence, the counter's atomic, the partials
# Special-function-unit ops (ir/ops.py `slots`) issue at a quarter of the FP32 rate.
SLOW_OPS = {name for name, op in OPS.items() if op.slots}


@dataclass(frozen=True)
class KernelWork:
    name: str
    threads: int                # per block
    blocks: int
    flops: float                # FLOPs of all threads (units.is_flop: a multiply-add is 2)
    fp_instructions: float      # warp instructions on the FP32 / SFU pipes
    instructions: float         # all warp instructions issued (arithmetic, loads, stores, copies)
    compulsory_bytes: int       # each tensor the kernel touches, once
    requested_bytes: float      # global bytes the threads ask for
    sector_bytes: float         # global bytes moved in whole 32-byte sectors (L2 traffic)
    smem_wavefronts: float      # shared-memory wavefronts, bank conflicts included
    barriers: float             # block barriers executed per block
    stage_bytes: int            # shared memory the kernel's stages take (double buffers twice)
    pipelined: bool = False     # copies overlap compute (double buffered or prefetched stages)
    prefetch: int = 0           # K tiles the stages are fetched ahead of their use (015: stages - 1)
    tensor_flops: float = 0.0   # of `flops`, those mma.sync does on tensor cores
    tensor_dtype: str = ""      # their input type (bf16, f16, tf32): Target.tensor_rate's key
    # round trips to memory a block makes after its main loop, one after another, before its
    # tile is done: an in-kernel split-K tail's fence, counter atomic and partials (3), else 0
    tail_round_trips: int = 0

    @property
    def coalescing(self) -> float:
        """Share of the fetched bytes the threads asked for: 1.0 when perfectly coalesced."""
        return self.requested_bytes / self.sector_bytes if self.sector_bytes else 1.0


class _Counter:
    def __init__(self, kernel: TileKernel, types: dict):
        self.kernel, self.types = kernel, types
        self.tile = kernel.tile()
        self.threads = math.prod(a.extent for a in self.tile.axes if a.kind == THREAD)
        self.blocks = math.prod(a.extent for a in self.tile.axes if a.kind != THREAD)
        self.warps = -(-self.threads // WARP)
        lanes = thread_values(self.tile)
        self.lanes = {v: vals[:WARP] for v, vals in lanes.items()}
        self.stages: dict[str, Stage] = {}
        self.smem = {(ld.stage, ld.dst): ld for ld in smem_loads(kernel)}
        self.touched: set[str] = set()
        self.flops = self.fp = self.instr = self.requested = self.sectors = self.tensor_flops = 0.0
        self.wavefronts = self.barriers = 0.0
        self.stage_bytes = 0
        self.pipelined = False
        self.prefetch = 0
        self.vector = 1             # elements per access inside a vector loop
        self.tail_round_trips = 0

    # -- helpers -----------------------------------------------------------------------------
    def _env(self, env: dict, e) -> dict:
        missing = free_vars(e) - env.keys()
        return {**env, **{v: np.int64(0) for v in missing}} if missing else env

    def _warp_sectors(self, tensor: str, index, env) -> tuple[float, float]:
        """(bytes asked, sectors) of one warp-wide access to a global tensor."""
        t = self.types[tensor]
        size = t.itemsize
        lanes = min(WARP, self.threads)
        if any(gathers(e) for e in index):        # data-dependent rows: assume one sector a lane
            return lanes * size, lanes
        flat = np.int64(0)
        for e, stride in zip(index, row_major_strides(t.shape)):
            flat = flat + evaluate(e, self._env(env, e)) * stride
        flat = np.asarray(flat, dtype=np.int64)     # (lanes,), or (4, lanes) inside a vector loop
        words = np.broadcast_to(flat, np.broadcast_shapes(flat.shape, (lanes,))).ravel()
        distinct = np.unique(words)
        return len(distinct) * size, len(np.unique(distinct * size // SECTOR))

    def _block_mean(self, expr, value) -> float | None:
        """The mean over the blocks of value(expr's values), where `expr` is an index of the
        block alone (no thread, no gather); None where it is not, or the grid is too large."""
        blocks = {a.var: a.extent for a in self.tile.axes if a.kind != THREAD}
        if expr is None or gathers(expr) or not free_vars(expr) <= blocks.keys():
            return None
        names = sorted(free_vars(expr))
        if math.prod(blocks[n] for n in names) > 1 << 16:
            return None
        grid = np.meshgrid(*(np.arange(blocks[n], dtype=np.int64) for n in names), indexing="ij")
        values = np.broadcast_to(evaluate(expr, dict(zip(names, grid))), grid[0].shape if grid else ())
        return float(value(values).mean())

    def _trips(self, loop: Loop) -> float:
        """A loop's iterations, averaged over the blocks where its bound `stop` is an index of
        the block (a causal flash kernel's key tiles up to the block's last query row); its
        extent where the bound is known at run time only."""
        mean = self._block_mean(loop.stop, lambda stop: np.clip(stop, 0, loop.extent))
        return loop.extent if mean is None else mean

    def _strided_trips(self, s: StridedLoop) -> float:
        """A strided loop's iterations: stop / step a thread where threads deal it out; where
        its start is an index of the block alone (a causal flash kernel's first key tile), the
        mean over the blocks of its iterations from there."""
        step = max(s.step, 1)
        if free_vars(s.start):
            mean = self._block_mean(s.start, lambda start: np.maximum(-(-(s.stop - start) // step), 0))
            if mean is not None:
                return mean
        return max(s.stop, 1) / step

    # -- the walk -------------------------------------------------------------------------------
    def visit(self, body, mult: float, env: dict) -> None:
        per_block = mult * self.blocks
        per_warp = per_block * self.warps
        per_thread = per_block * self.threads
        for s in body:
            if isinstance(s, SplitArrive):
                # a fence, two barriers and one thread's atomic in every block; what follows
                # runs in one block of each `splits` (the tile's last): 1/splits of the grid
                self.barriers += 2 * mult
                self.instr += per_block * 3
                self.tail_round_trips = SPLIT_TAIL_ROUND_TRIPS
                mult /= s.splits
                per_block = mult * self.blocks
                per_warp = per_block * self.warps
                per_thread = per_block * self.threads
                continue
            if isinstance(s, Loop) and s.kind == "vector":
                # 005's float4 loop: one 16-byte access per lane covers all its elements, so
                # a warp's access spans every value of the vector variable at once; its
                # arithmetic still runs once per element.
                self.vector = s.extent
                self.visit(s.body, mult, {**env, s.var: np.arange(s.extent, dtype=np.int64)[:, None]})
                self.vector = 1
            elif isinstance(s, Loop):
                self.visit(s.body, mult * self._trips(s), {**env, s.var: np.int64(0)})
            elif isinstance(s, StridedLoop):
                start = evaluate(s.start, self._env(env, s.start))
                self.visit(s.body, mult * self._strided_trips(s), {**env, s.var: start})
            elif isinstance(s, Stage):
                self._stage(s, per_block)
            elif isinstance(s, AsyncWait):
                self.barriers += mult
            elif isinstance(s, Combine):
                lanes = self.tile.axis(s.over[0]).extent
                shuffles = math.log2(min(lanes, WARP)) if lanes > 1 else 0
                if s.slots and s.reduction == "gather":     # one broadcast a slot
                    self.instr += per_warp * s.slots
                elif s.slots:       # a transposing reduce: a shuffle, an add and two selects a pair
                    pairs = s.slots * (lanes - 1) / lanes
                    self.instr += per_warp * 4 * pairs
                    self.fp += per_warp * pairs
                else:
                    self.instr += per_warp * 2 * shuffles
                    self.fp += per_warp * shuffles
                if lanes > WARP:
                    self.barriers += mult
                    self.wavefronts += per_warp * 2
            elif isinstance(s, Load):
                if s.tensor not in self.types and s.tensor not in self.stages:
                    continue                      # a register array (008's accumulators)
                if s.tensor in self.stages:
                    ld = self.smem.get((s.tensor, s.dst))
                    degree = ld.wavefronts / ld.slots if ld and ld.slots else 1
                    self.wavefronts += per_warp * degree
                else:
                    self._global(s.tensor, s.index, env, per_warp)
                self.instr += per_warp
            elif isinstance(s, Store):
                if s.tensor in self.types:        # else a row kept on chip (row fusion's locals)
                    self._global(s.tensor, s.index, env, per_warp)
                self.instr += per_warp
            elif isinstance(s, MmaSync):           # one warp-wide tensor-core instruction
                shape = MMA_SHAPES[s.shape]
                self.flops += per_warp * 2 * shape.m * shape.n * shape.k
                self.tensor_flops += per_warp * 2 * shape.m * shape.n * shape.k
                self.instr += per_warp
            elif isinstance(s, WarpgroupMma):      # one wgmma per warpgroup: each warp's quarter of it
                self.flops += per_warp * 2 * 64 * s.n * 16 // 4
                self.tensor_flops += per_warp * 2 * 64 * s.n * 16 // 4
                self.instr += per_warp
            elif isinstance(s, FragmentLoad):      # an ldmatrix, or a shared load per element
                ld = self.smem.get((s.stage, s.dst))
                self.wavefronts += per_warp * (ld.wavefronts / ld.slots if ld and ld.slots else 1)
                size = 1 if s.via.startswith("ldmatrix") else self.kernel.mma.fragment_size(s.operand)
                self.instr += per_warp * size
            elif isinstance(s, (Compute, Accumulate)):
                op = s.op if isinstance(s, Compute) else "add"
                slow = 4 if op in SLOW_OPS else 1
                if is_flop(s):
                    self.flops += per_thread * self.vector
                self.fp += per_warp * slow * self.vector
                self.instr += per_warp * self.vector

    def _global(self, tensor, index, env, per_warp) -> None:
        self.touched.add(tensor)
        asked, sectors = self._warp_sectors(tensor, index, env)
        self.requested += per_warp * asked
        self.sectors += per_warp * sectors * SECTOR

    def _stage(self, s: Stage, per_block: float) -> None:
        self.stages[s.name] = s
        self.touched.add(s.tensor)
        size = self.types[s.tensor].itemsize
        row = s.slab[-1].extent * size
        rows = s.size // max(s.slab[-1].extent, 1)
        self.requested += per_block * s.size * size
        self.sectors += per_block * rows * -(-row // SECTOR) * SECTOR
        vector = 4 if row % 16 == 0 else 1
        # sync: a load and a store per chunk; cp.async: one instruction; TMA: one per row, one thread.
        per_chunk = {"sync": 2, "async": 1}.get(s.copy, 0)
        self.instr += per_block * (-(-s.size // (WARP * vector)) * per_chunk if per_chunk else rows / WARP)
        self.pipelined |= s.prefetch > 0 or s.buffers > 1
        self.prefetch = max(self.prefetch, s.prefetch)
        self.stage_bytes += (s.size + s.pad * rows) * 4 * s.buffers
        if s.copy == "sync":
            self.barriers += per_block / self.blocks


def tensor_dtype(kernel: TileKernel) -> str:
    """The input type of the kernel's mma.sync (008's MmaTile, or a flash kernel's record on
    tensor cores: FlashPlan.mma), '' for a kernel on FFMA."""
    if kernel.mma is not None:
        return kernel.mma.shape.dtype
    flash = getattr(kernel.flash, "mma", None)
    return flash.kind if flash is not None else ""


def count_work(kernel: TileKernel, types: dict) -> KernelWork:
    """The work of one scheduled Tile-IR kernel; `types` maps tensor names to TensorType."""
    c = _Counter(kernel, types)
    plan = dealt(kernel)
    if isinstance(plan, StreamKPlan):
        # stream-K (passes/split/stream_k.py): the split grid's work, dealt to the plan's
        # workers; a worker flushes a partial (the tail's round trips) for each tile its run crosses
        dealt_from = c.blocks
        c.blocks = plan.workers
        c.visit(c.tile.body, dealt_from / plan.workers, dict(c.lanes))
        c.tail_round_trips = SPLIT_TAIL_ROUND_TRIPS * (1 + -(-(plan.trips - 1) // plan.chunks))
    else:
        c.visit(c.tile.body, 1.0, dict(c.lanes))
    # A pre-Tile prologue (uniform statements before the Tile) is negligible; the Tile is the kernel.
    # each touched tensor once, but never more than the kernel asks for: a kernel that reads a
    # slice (a split-K reducer's K tail of w, g and u) touches only that slice
    compulsory = min(sum(types[t].numel * types[t].itemsize for t in sorted(c.touched) if t in types), c.requested)
    return KernelWork(kernel.name, c.threads, c.blocks, c.flops, c.fp, c.instr, int(compulsory), c.requested,
                      c.sectors, c.wavefronts, c.barriers, c.stage_bytes, c.pipelined, c.prefetch,
                      c.tensor_flops, tensor_dtype(kernel),
                      c.tail_round_trips)
