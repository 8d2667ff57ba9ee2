"""Stream-K's arithmetic on a split kernel (003 reduce=stream_k): the deal of a scheduled tile
grid's K chunks to workers, which the lowering spells (passes/split/stream_k.py) and the
analyses count (analysis/work.py) from the same plan, so the two never disagree.

003 decides stream-K and its worker count from the tiles it planned (grid_plan.stream_k_plan)
and sizes the partials' workspace for them (SplitK.slots); the tiles 005 and 008 then make
may differ (a tuned thread shape), so the plan is fitted to the scheduled tile count: the
most workers, up to 003's, whose tiles' segments fit the workspace (`fitted`)."""
from __future__ import annotations

from dataclasses import dataclass

from .loop_ir import Accumulate, Loop
from .tile_ir import THREAD, AsyncWait, SplitArrive, Stage, walk


@dataclass(frozen=True)
class StreamKPlan:
    """Stream-K's deal of `tiles` output tiles x `chunks` K chunks (I = their product, the
    iterations) to `workers` blocks: worker w runs iterations floor(w I / W) .. floor((w+1) I / W)
    - 1, `run` or `run` + 1 of them, across the tiles they fall in (a segment of each); a tile
    cut into several segments is summed by the last of them to arrive, from at most `slots`
    partials, in segment order. Every worker is one block and runs `trips` iterations (the
    shorter ones one more, whose product is dropped: one K loop of a static trip count), so the
    SMs finish together."""
    tiles: int
    chunks: int
    workers: int

    @property
    def iterations(self) -> int:
        return self.tiles * self.chunks

    @property
    def run(self) -> int:
        return self.iterations // self.workers

    @property
    def trips(self) -> int:
        return self.run + (1 if self.iterations % self.workers else 0)

    def start(self, w: int) -> int:
        return w * self.iterations // self.workers

    def owner(self, g: int) -> int:
        """The worker that runs iteration g: the largest w with start(w) <= g."""
        return ((g + 1) * self.workers - 1) // self.iterations

    def segments(self, tile: int) -> int:
        """How many workers share tile `tile`'s chunks."""
        first = tile * self.chunks
        return self.owner(first + self.chunks - 1) - self.owner(first) + 1

    @property
    def fits_int32(self) -> bool:
        """Whether the deal's index arithmetic (a worker times the iterations, an iteration
        times the workers: `owner`) stays under 2**31, the kernel's 32-bit ints."""
        return (self.iterations + 1) * self.workers < 1 << 31

    @property
    def slots(self) -> int:
        """Partials a tile's segments store at most (the workspace's leading extent)."""
        return max(self.segments(t) for t in range(self.tiles))

    def text(self) -> str:
        runs = f"{self.run}" if self.trips == self.run else f"{self.run} or {self.run + 1}"
        return (f"stream-K: {self.workers} workers deal {self.tiles} tiles x {self.chunks} K chunks, "
                f"{runs} each; a tile's segments (at most {self.slots}) are added in order by the last to arrive")


def fitted(tiles: int, chunks: int, workers: int, partials: int) -> StreamKPlan:
    """The plan of `tiles` x `chunks` iterations for the most workers, up to `workers` (and
    the iterations), that cut no tile into more than `partials` segments (003 sized the
    workspace for its tiles; as many workers as tiles cut one in 2 at most, which a split's
    2 partials hold)."""
    for w in range(min(workers, tiles * chunks), 0, -1):
        plan = StreamKPlan(tiles, chunks, w)
        if plan.slots <= partials:
            return plan
    return StreamKPlan(tiles, chunks, 1)


def dealt(kernel) -> StreamKPlan | str:
    """The plan a stream-K split kernel's K chunks are dealt by, or why it runs as the
    in-kernel split it also is (the last of each tile's split blocks adds the partials)."""
    split = kernel.split_k
    if split is None or not split.stream_k:
        return "no stream-K split"
    body = kernel.tile().body
    arrive = next((s for s in body if isinstance(s, SplitArrive)), None)
    lead = leading_stages(body)
    loop = body[len(lead)] if lead is not None and len(body) > len(lead) else None
    if arrive is None or not isinstance(loop, Loop) or loop.role != "K" or loop.kind != "reduce":
        return ("its tile is not a K loop (after stages of the epilogue's operands), the partials' stores and "
                "their arrival")
    if accumulator(kernel) is None:
        return "its K loop does not fold into one float32 accumulator"
    tiles = 1
    for a in kernel.tile().axes:
        if a.kind != THREAD and a.var != arrive.split:
            tiles *= a.extent
    plan = fitted(tiles, split.splits * loop.extent, split.workers, split.partials)
    return plan if plan.fits_int32 else "its deal's index arithmetic would pass 32-bit ints"


def leading_stages(body) -> tuple | None:
    """The statements before a split kernel's K loop where each is a stage of an operand of
    the epilogue (a bias's slab of the block's tile: one buffer, copied as it is, no prologue)
    or the wait for one; None where another statement stands there. A dealt worker's tile
    changes along its run, so the epilogue reads those operands from global memory instead
    (ir.stages.global_index)."""
    out = []
    for s in body:
        if isinstance(s, Loop) and s.role == "K":
            return tuple(out)
        if isinstance(s, Stage) and s.buffers == 1 and s.prologue is None and s.dtype == "float32":
            out.append(s)
        elif isinstance(s, AsyncWait):
            out.append(s)
        else:
            return None
    return None


def accumulator(kernel) -> str | None:
    """The one float32 accumulator the kernel's K loop folds into (an mma's fragments), else None."""
    if kernel.mma is not None:
        return kernel.mma.acc
    body = kernel.tile().body
    loop = body[len(leading_stages(body) or ())]
    accs = {(a.acc, a.dtype) for a, _ in walk(loop.body) if isinstance(a, Accumulate)}
    if len(accs) != 1 or next(iter(accs))[1] != "float32":
        return None
    return next(iter(accs))[0]
