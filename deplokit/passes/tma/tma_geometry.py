"""Which Stages one TMA tensor-map copy can fill, and in which swizzle (011 tma_copy, 012
swizzle, the verifier and the lowering read the same rules, so a pass only promises what the
copy can keep).

A tensor map copies a *box* (per tensor dimension, an extent of at most 256 elements) whose
first element is at any coordinates, elements outside the tensor reading as zero, and writes
it into shared memory row-major in the tensor's dimension order (optionally swizzled:
deplokit.ir.swizzle). A slab is such a box when its axes run along distinct dimensions in
that order (the shared layout of a slab is row-major over its axes) and its rows are not
padded. The driver encodes the map only when

  * the global strides (every dimension but the innermost) are multiples of 16 bytes: the
    tensor's last extent times 4 bytes is a multiple of 16,
  * the box's inner row is a multiple of 16 bytes, each box extent at most 256 (and, as
    deplokit encodes it, within the tensor),
  * the tensor has at most 5 dimensions.

The box lands at a 128-byte aligned shared address (each buffer of a double-buffered stage
is a whole number of 128-byte lines). Where the slab crosses the tensor's end (odd M, N or
K tails) the copy reads zeros: no clamp, no split, no guard.
"""
from __future__ import annotations

from ...ir.swizzle import REPEAT
from ...ir.tile_ir import Stage, TmaBox

MAX_RANK = 5
MAX_BOX = 256
GLOBAL_ALIGN = 16            # bytes: every global stride, the box's inner row
SMEM_ALIGN = 128             # bytes: where a box lands in shared memory
FLOAT = 4
HALF_BYTES = {"bfloat16": 2, "float16": 2}
MAX_SPAN = 128               # bytes: the widest swizzle's row


def tensor_map_box(stage: Stage, shape, dtype: str = "float32") -> tuple[TmaBox | None, str]:
    """(the box one tensor-map copy fills the stage with, unswizzled, '') or (None, why not).
    A half tensor's box is copied raw: only into a stage that holds its halves (008's wgmma
    operands), not one that converts them to float32 on the way."""
    shape = tuple(shape)
    if dtype in HALF_BYTES and stage.dtype == dtype:
        size = HALF_BYTES[dtype]
    elif dtype != "float32":
        return None, f"{stage.tensor} is {dtype}, not float32 (nor held raw by the stage)"
    else:
        size = FLOAT
    if not 1 <= len(shape) <= MAX_RANK:
        return None, f"{stage.tensor} has {len(shape)} dimensions; a tensor map takes 1 to {MAX_RANK}"
    if stage.pad:
        return None, f"rows padded by {stage.pad} floats (a box lands unpadded)"
    dims = [ax.dim for ax in stage.slab]
    if any(b <= a for a, b in zip(dims, dims[1:])):
        return None, (f"slab axes run along dimensions {tuple(dims)}, not one each in the tensor's order "
                      f"(a box lands in that order)")
    box = [1] * len(shape)
    for ax in stage.slab:
        box[ax.dim] = ax.extent
    boxes = 1
    if size < FLOAT and box[-1] * size > MAX_SPAN and box[-1] * size % MAX_SPAN == 0:
        # a half row wider than the widest swizzle span: boxes of one span side by side
        boxes, box[-1] = box[-1] * size // MAX_SPAN, MAX_SPAN // size
    if any(b > MAX_BOX or b > s for b, s in zip(box, shape)):
        return (
            None,
            f"box {tuple(box)} of {stage.tensor} {shape}: each extent must be at most {MAX_BOX} and the tensor's",
        )
    if box[-1] * size % GLOBAL_ALIGN:
        return None, f"the box's inner row is {box[-1] * size} bytes, not a multiple of {GLOBAL_ALIGN}"
    if len(shape) > 1 and shape[-1] * size % GLOBAL_ALIGN:
        return None, (f"{stage.tensor}'s rows are {shape[-1] * size} bytes apart, not a multiple of "
                      f"{GLOBAL_ALIGN} (a tensor map's strides must be)")
    nbytes = box_bytes(box, size)
    if nbytes % SMEM_ALIGN:
        return None, f"a box of {nbytes} bytes would leave the next buffer off a {SMEM_ALIGN}-byte line"
    return TmaBox(tuple(box), element_bytes=size, boxes=boxes), ""


def box_bytes(box, element_bytes: int = FLOAT) -> int:
    n = element_bytes
    for b in box:
        n *= b
    return n


def swizzle_for(box: TmaBox) -> tuple[int, str]:
    """(swizzle span in bytes, '') for a box whose inner row is exactly a swizzle span (32, 64
    or 128 bytes) and whose buffers start on the pattern's repeat; else (0, why not)."""
    row = box.box[-1] * box.element_bytes
    nbytes = box_bytes(box.box, box.element_bytes)
    if row not in (32, 64, 128):
        return 0, f"inner rows of {row} bytes are no swizzle span (32, 64 or 128 bytes)"
    if nbytes % REPEAT[row]:
        return 0, f"a box of {nbytes} bytes is not a whole {REPEAT[row]}-byte swizzle pattern"
    return row, ""
