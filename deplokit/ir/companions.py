"""The kernels a scheduled kernel brings along, as the decisions that add them: 003's split-K
(a reducer launched right after it) and 011's repacks (a copy kernel launched right before
it). Tile IR stamps them on the kernel (TileKernel.split_k, TileKernel.repacks); split-K
reduced in the kernel itself marks its last block's arrival with a SplitArrive statement."""
from __future__ import annotations

from dataclasses import dataclass

from .index import Affine


@dataclass(frozen=True)
class SplitK:
    """003's split-K decision: `splits` blocks share an output tile's K range and store
    partial sums into `workspace` (splits x the output's shape); the kernel `reducer`
    (launched right after) adds them up in split order and applies the epilogue."""
    splits: int
    workspace: str
    reducer: str
    leftover: int = 0       # K chunks past splits x (chunks // splits): the reducer's, with the K tail
    # in_kernel: no reducer kernel; the last block of each output tile to arrive (an int
    # counter per tile in `counter`, zero between launches) adds the partials in split order
    reduce: str = "reducer"
    counter: str = ""
    # K chunks past the end that the last split runs as zeros: a split count that is neither a
    # power of two nor a divisor of the chunks gives every split ceil(chunks / splits) of them
    # (the loads past K read zeros: every block runs as long, the grid stays balanced)
    overhang: int = 0
    # stream_k (a kind of in_kernel): `workers` blocks deal the `tiles` output tiles' K chunks
    # (splits x each split's run) out evenly, a worker's run crossing tiles; each tile's
    # segments store up to `slots` partials, added in order by the last to arrive
    # (ir/stream_k.py's StreamKPlan; the lowering deals the kernel: passes/split/stream_k.py)
    workers: int = 0
    tiles: int = 0
    slots: int = 0

    @property
    def in_kernel(self) -> bool:
        return self.reduce in ("in_kernel", "stream_k")

    @property
    def stream_k(self) -> bool:
        return self.reduce == "stream_k"

    @property
    def partials(self) -> int:
        """The workspace's leading extent: one partial a split, or a stream-K tile's segments."""
        return max(self.splits, self.slots)

    def text(self) -> str:
        over = f", {self.overhang} K chunks past the end run as zeros" if self.overhang else ""
        if self.stream_k:
            return (f"stream-K: {self.workers} workers deal {self.tiles} tiles x {self.splits} splits' K chunks "
                    f"into {self.workspace} (at most {self.slots} segments a tile), added in the kernel by the last "
                    f"to arrive (counter {self.counter}){over}  # deterministic: segment order")
        if self.in_kernel:
            return (f"split-K {self.splits} into {self.workspace}, reduced in the kernel by the last block of "
                    f"each tile (counter {self.counter}){over}  # deterministic: split order")
        rest = f", {self.leftover} K chunks left to it" if self.leftover else ""
        return f"split-K {self.splits} into {self.workspace}, reduced by {self.reducer}{rest}{over}  # deterministic"


@dataclass(frozen=True)
class Repack:
    """011's repack decision: the kernel stages `tensor`, whose rows are not a multiple of 16
    bytes apart (no tensor map can describe it), from `workspace` instead: the same rows
    with their innermost extent rounded up to `shape[-1]`, the padding zero (as a tensor
    map's out-of-bounds reads). The kernel `kernel` (launched just before, repack/repack.py)
    copies it there."""
    tensor: str
    workspace: str
    shape: tuple[int, ...]         # the workspace's: the tensor's, its last extent padded
    kernel: str

    def text(self) -> str:
        return (f"repack {self.tensor} into {self.workspace}[{', '.join(map(str, self.shape))}] by {self.kernel}"
                f"  # 16-byte rows: a tensor map")


@dataclass(frozen=True)
class SplitArrive:
    """Split-K reduced in the GEMM (003, reduce=in_kernel): after a block has stored its
    partial sum, it counts itself in on its output tile's counter (`counter`, one int per
    output tile, indexed by the block axes but the split axis `split`); every block but the
    last of the `splits` to arrive ends here, and the last runs the statements after this
    one (the partials added in split order, the epilogue) and resets the counter to 0 for
    the next launch. Materialised as a fence, one integer atomic and a block-wide broadcast
    (passes/split/split_tail.py): which block is last depends on timing, the sum's order
    does not."""
    counter: str
    split: str                     # the BLOCK axis of role K (003's a2s)
    splits: int
    # stream-K (passes/split/stream_k.py): the output tile and how many segments arrive on it,
    # both known at run time only (indices of the worker and its K iteration)
    tile: Affine | None = None
    arrivals: Affine | None = None

    def text(self) -> str:
        if self.tile is not None:
            return (f"SplitArrive({self.counter}[{self.tile}], of {self.arrivals} segments)  # the last to arrive "
                    f"goes on")
        return f"SplitArrive({self.counter}[tile], of {self.splits} along {self.split})  # the last block goes on"


@dataclass(frozen=True)
class StreamKFlush:
    """Stream-K's end of a segment, inside the dealt K loop (passes/split/stream_k.py): where
    the worker's iteration `step` is its last of a tile (the tile's last K chunk, `chunk` ==
    `chunks` - 1, or the worker's last iteration, `step` == `owned` - 1, of the `owned` it runs
    for real), `body` stores the segment's partial, counts it in and, the last to arrive, adds
    the tile's partials and runs the epilogue; `reset` then zeroes the accumulator for the
    next tile's segment.
    It lives only between the deal and k001's materialisation (the printed Tile IR is the
    split as scheduled): the Tile-IR walkers do not descend into it."""
    step: str
    owned: Affine
    chunk: Affine
    chunks: int
    body: tuple
    reset: tuple

    def text(self) -> str:
        return (f"StreamKFlush(if {self.step} < {self.owned} and ({self.chunk} == {self.chunks - 1} or "
                f"{self.step} == {self.owned} - 1))  # a segment ends: its partial, the tile's last adds")
