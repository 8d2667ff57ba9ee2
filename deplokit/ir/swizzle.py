"""How a TMA tensor copy lands in shared memory: the box (TmaBox, stamped on a Stage by 011)
and the swizzle it is written in (012), in one place: where the copy writes an
element and where every read of it must look (Tile IR bank analysis, the lowering of stage
loads, the simulator's copies, the host's tensor-map model all use these).

A copy written with a swizzle span of S bytes (32, 64 or 128) XORs the 16-byte chunk index
(address bits 4..) with the row of 128 bytes (bits 7..), over S / 16 chunks: a column of a
row-major tile then spreads over S / 16 chunks of banks instead of one. The pattern repeats
every S / 16 rows of 128 bytes (256, 512, 1024 bytes for 32, 64, 128: REPEAT), so a swizzled
buffer starts on a multiple of that."""
from __future__ import annotations

from dataclasses import dataclass

SPANS = (0, 32, 64, 128)                  # bytes; 0: no swizzle
REPEAT = {0: 16, 32: 256, 64: 512, 128: 1024}


def swizzle_bytes(byte_offset, span: int):
    """Where the byte at `byte_offset` of a box written with swizzle `span` lands. Works on
    ints and numpy arrays."""
    if span not in SPANS:
        raise ValueError(f"swizzle {span} bytes; supported: {', '.join(map(str, SPANS))}")
    if not span:
        return byte_offset
    return byte_offset ^ (((byte_offset >> 7) & (span // 16 - 1)) << 4)


def swizzle_word(word, span: int):
    """The same for a 4-byte word index (a float of a float32 box): word bits 2.. are the
    chunk, bits 5.. the 128-byte row."""
    if span not in SPANS:
        raise ValueError(f"swizzle {span} bytes; supported: {', '.join(map(str, SPANS))}")
    if not span:
        return word
    return word ^ (((word >> 5) & (span // 16 - 1)) << 2)


@dataclass(frozen=True)
class TmaBox:
    """How a TMA stage is copied (011 tma_copy, 012 swizzle): one tensor-map copy
    (cp.async.bulk.tensor) of a box of `box` elements per tensor dimension (outermost first;
    the slab's extent along a dimension it spans, 1 elsewhere; rank = the tensor's rank) at
    the slab's origin, elements outside the tensor read as zero; written into shared memory
    with a swizzle span of `swizzle` bytes (0: none; 32, 64, 128: see deplokit.ir.swizzle),
    which every read of the stage applies too. `boxes` copies of it side by side along the
    innermost dimension (the k-th at origin + k * box[-1] there) fill a slab whose rows are
    wider than the widest swizzle span: they land one after the other in shared memory (box k
    at k * the box's elements), so a row-major K x 128 half tile is two 64-column swizzle
    atoms, as wgmma's MN-major descriptor reads it (the leading offset steps between them)."""
    box: tuple[int, ...]
    swizzle: int = 0
    element_bytes: int = 4         # 2: a half tensor's box, copied raw (008's wgmma operands)
    boxes: int = 1                 # copies along the innermost dimension, placed one after another

    @property
    def elements(self) -> int:
        """Elements of one box (the next box's offset in shared memory)."""
        n = 1
        for b in self.box:
            n *= b
        return n

    @property
    def rank(self) -> int:
        return len(self.box)

    def text(self) -> str:
        return ("tmap=" + "x".join(map(str, self.box)) + (f"*{self.boxes}" if self.boxes > 1 else "")
                + (f",swizzle={self.swizzle}B" if self.swizzle else ""))
