"""The host half of a TMA tensor copy (sm_90+): the arguments of the driver's
`cuTensorMapEncodeTiled` for one operand of a kernel, decided and checked without a GPU.

A tensor map describes a global tensor (dims and byte strides, innermost first) and the box
one `cp.async.bulk.tensor` copies into shared memory (box dims, the swizzle pattern it is
written in, what out-of-bounds elements read). The kernel receives it as a
`const __grid_constant__ CUtensorMap` parameter. `tensor_map_args` turns a row-major shape
and a box into those arguments and refuses what the driver would refuse (rank, alignment,
box extents, a swizzle span the box's inner row does not fit); `encode` makes the driver call
(libcuda's cuTensorMapEncodeTiled through ctypes, a device only). The launch plan records
these arguments per tensor-map parameter of a kernel (runtime/launch_plan.py TensorMapArg);
the CuPy backend encodes them for the device buffers and passes each map by value.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..errors import TensorMapError
from ..ir.swizzle import swizzle_bytes as swizzle_bytes_of
from ..ir.types import DTYPE_BYTES

# CUtensorMapDataType values (cuda.h) of the element types deplokit stores
DATA_TYPE = {"float32": 7, "int32": 3, "int64": 5,     # FLOAT32, INT32, INT64 (cuda.h: 5)
             "bfloat16": 9, "float16": 6}              # BFLOAT16, FLOAT16 (wgmma's operands)
# CUtensorMapSwizzle: span in bytes of one swizzled row -> enum (0: none)
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
INTERLEAVE_NONE = 0
L2_PROMOTION_128B = 2
OOB_FILL_ZERO = 0                                        # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros
MAX_RANK = 5
MAX_BOX = 256
MAX_STRIDE = 1 << 40
GLOBAL_ALIGN = 16                                        # bytes: address and every stride


@dataclass(frozen=True)
class TensorMapArgs:
    """cuTensorMapEncodeTiled's arguments except the address, in the driver's order and
    convention: dims innermost first, `global_strides` in bytes for dims 1.. (rank - 1)."""
    data_type: int
    rank: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int

    @property
    def box_bytes(self) -> int:
        """Bytes one copy writes into shared memory (what the mbarrier expects)."""
        n = _ELEM_BYTES[self.data_type]
        for b in self.box_dims:
            n *= b
        return n


_ELEM_BYTES = {code: DTYPE_BYTES[name] for name, code in DATA_TYPE.items()}


def tensor_map_args(shape, dtype: str, box, swizzle_bytes: int = 0) -> TensorMapArgs:
    """The tensor map of a row-major tensor `shape` copied in boxes of `box` (both outermost
    first, as the IR writes them), swizzled in rows of `swizzle_bytes` (0, 32, 64, 128)."""
    shape, box = tuple(shape), tuple(box)
    where = f"tensor map of a {dtype} tensor {shape} in boxes {box}"
    if dtype not in DATA_TYPE:
        raise TensorMapError(f"{where}: element type {dtype}; supported: {', '.join(DATA_TYPE)}")
    if not 1 <= len(shape) <= MAX_RANK or len(box) != len(shape):
        raise TensorMapError(f"{where}: rank {len(shape)} with a box of rank {len(box)}; TMA takes ranks 1 to "
                             f"{MAX_RANK}, the box the tensor's rank")
    if swizzle_bytes not in SWIZZLE:
        raise TensorMapError(f"{where}: swizzle {swizzle_bytes} bytes; supported: {', '.join(map(str, SWIZZLE))}")
    if any(not 1 <= b <= min(MAX_BOX, s) for b, s in zip(box, shape)):
        raise TensorMapError(f"{where}: each box extent must be 1..{MAX_BOX} and within the tensor")
    size = DTYPE_BYTES[dtype]
    inner = box[-1] * size
    if inner % 16:
        raise TensorMapError(f"{where}: the box's inner row is {inner} bytes, not a multiple of 16")
    if swizzle_bytes and inner > swizzle_bytes:
        raise TensorMapError(f"{where}: the box's inner row ({inner} bytes) is wider than the "
                             f"{swizzle_bytes}-byte swizzle span")
    dims = shape[::-1]
    strides, stride = [], size
    for d in dims[:-1]:
        stride *= d
        strides.append(stride)
    if any(s % GLOBAL_ALIGN or s >= MAX_STRIDE for s in strides):
        raise TensorMapError(f"{where}: row strides {tuple(strides)} bytes must be multiples of {GLOBAL_ALIGN} "
                             f"below 2^40 (pad the rows or use cp.async)")
    return TensorMapArgs(DATA_TYPE[dtype], len(shape), dims, tuple(strides), box[::-1], (1,) * len(shape),
                         INTERLEAVE_NONE, SWIZZLE[swizzle_bytes], L2_PROMOTION_128B, OOB_FILL_ZERO)


# cuda.h's CUtensorMap: 128 opaque bytes the kernel takes by value (passed to CuPy as this
# structured numpy scalar; the kernel declares the same layout, 64-byte aligned)
TENSOR_MAP_DTYPE = np.dtype([("opaque", np.uint64, (16,))])


def encode(args: TensorMapArgs, address: int, driver=None):
    """The CUtensorMap for a device buffer at `address`, as a TENSOR_MAP_DTYPE scalar: the
    driver's cuTensorMapEncodeTiled (libcuda through ctypes, no other binding needed; a GPU
    only). `driver`: an object with that entry point (default: libcuda.so.1)."""
    if address % GLOBAL_ALIGN:
        raise TensorMapError(f"tensor map: global address {address:#x} is not {GLOBAL_ALIGN}-byte aligned")
    lib = driver if driver is not None else _libcuda()
    out = np.zeros(1, dtype=TENSOR_MAP_DTYPE)
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    err = lib.cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.ctypes.data), ctypes.c_int(args.data_type), u32(args.rank), ctypes.c_void_p(address),
        (u64 * args.rank)(*args.global_dims), (u64 * max(args.rank - 1, 1))(*args.global_strides),
        (u32 * args.rank)(*args.box_dims), (u32 * args.rank)(*args.element_strides),
        ctypes.c_int(args.interleave), ctypes.c_int(args.swizzle), ctypes.c_int(args.l2_promotion),
        ctypes.c_int(args.oob_fill))
    if err:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed with CUresult {err} for {args}")
    return out[0]


def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise TensorMapError("encoding a tensor map needs the CUDA driver (libcuda.so.1)") from None


def swizzle_offset(byte_offset, swizzle_bytes: int):
    """Where the hardware puts the byte at `byte_offset` of a box written with a swizzle span
    of `swizzle_bytes` (deplokit.ir.swizzle: the 16-byte chunk index XOR the row of 128
    bytes, over 2, 4 or 8 chunks for 32, 64, 128 bytes). A shared-memory read of a swizzled
    box must apply the same XOR. Works on ints and numpy arrays."""
    if swizzle_bytes not in SWIZZLE:
        raise TensorMapError(f"swizzle {swizzle_bytes} bytes; supported: {', '.join(map(str, SWIZZLE))}")
    return swizzle_bytes_of(byte_offset, swizzle_bytes)


def box_values(flat, shape, box, origins) -> np.ndarray:
    """The elements of the boxes `box` (outermost first) at `origins` (one row of
    coordinates per copy) of the row-major tensor `shape` stored in the 1-d array `flat`,
    row-major per box, elements outside the tensor read as zero: (copies, box elements)."""
    box, shape = tuple(box), np.asarray(shape, dtype=np.int64)
    idx = np.indices(box, dtype=np.int64).reshape(len(box), -1)
    coords = np.asarray(origins, dtype=np.int64).reshape(-1, len(box), 1) + idx[None]
    inside = np.all((coords >= 0) & (coords < shape.reshape(1, -1, 1)), axis=1)
    strides = np.concatenate([np.cumprod(shape[::-1])[:-1][::-1], [1]]).reshape(1, -1, 1)
    at = np.where(inside, (np.clip(coords, 0, None) * strides).sum(axis=1), 0)
    return np.where(inside, flat[np.minimum(at, flat.size - 1)], np.zeros((), flat.dtype))


def copy_box(tensor, origin, args: TensorMapArgs):
    """What one tensor copy writes to shared memory, as the simulator models it: the box at
    `origin` (outermost first) of the numpy `tensor`, elements outside the tensor read as
    zero, laid out row-major and then swizzled (one flat array of the box's elements)."""
    box = args.box_dims[::-1]
    values = box_values(tensor.reshape(-1), tensor.shape, box, [origin])[0]
    size = tensor.dtype.itemsize
    span = {v: k for k, v in SWIZZLE.items()}[args.swizzle]
    at = swizzle_offset(np.arange(values.size) * size, span) // size
    out = np.empty_like(values)
    out[at] = values
    return out
