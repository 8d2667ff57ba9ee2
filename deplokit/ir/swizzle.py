"""The shared-memory swizzle of a TMA tensor copy, in one place: where the copy writes an
element and where every read of it must look (Tile IR bank analysis, the lowering of stage
loads, the simulator's copies, the host's tensor-map model all use these).

A copy written with a swizzle span of S bytes (32, 64 or 128) XORs the 16-byte chunk index
(address bits 4..) with the row of 128 bytes (bits 7..), over S / 16 chunks: a column of a
row-major tile then spreads over S / 16 chunks of banks instead of one. The pattern repeats
every S / 16 rows of 128 bytes (256, 512, 1024 bytes for 32, 64, 128: REPEAT), so a swizzled
buffer starts on a multiple of that."""
from __future__ import annotations

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
