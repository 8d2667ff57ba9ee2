"""The kernels a scheduled kernel brings along, as the decisions that add them: 003's split-K
(a reducer launched right after it) and 011's repacks (a copy kernel launched right before
it). Tile IR stamps them on the kernel (TileKernel.split_k, TileKernel.repacks); split-K
reduced in the kernel itself marks its last block's arrival with a SplitArrive statement."""
from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def in_kernel(self) -> bool:
        return self.reduce == "in_kernel"

    def text(self) -> str:
        if self.in_kernel:
            over = f", {self.overhang} K chunks past the end run as zeros" if self.overhang else ""
            return (f"split-K {self.splits} into {self.workspace}, reduced in the kernel by the last block of "
                    f"each tile (counter {self.counter}){over}  # deterministic: split order")
        rest = f", {self.leftover} K chunks left to it" if self.leftover else ""
        rest += f", {self.overhang} K chunks past the end run as zeros" if self.overhang else ""
        return f"split-K {self.splits} into {self.workspace}, reduced by {self.reducer}{rest}  # deterministic"


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

    def text(self) -> str:
        return f"SplitArrive({self.counter}[tile], of {self.splits} along {self.split})  # the last block goes on"
