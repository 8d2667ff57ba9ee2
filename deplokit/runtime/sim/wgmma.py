"""The simulator's warpgroup MMA (an advanced feature: passes/wgmma/): the Kernel-IR
statements WgmmaDescriptor, WgmmaFence, Wgmma, WgmmaCommit and WgmmaWait, each run by a
function taking the chunk (sim/exec.py's Chunk, whose FEATURE_STATEMENTS table merges
this module's STATEMENTS) as its first argument.

A descriptor is the 64-bit value PTX defines, its start address counted from the start of
its shared array (arrays here have no common address space; a swizzled array starts on a
repeat of its pattern, as the renderer's do). Wgmma decodes its two descriptors, reads
A (64 x 16) and B (n x 16, K-major) from shared memory where hardware would (through the
swizzle, ir/swizzle.py), adds the exact products in FP32 and writes the D fragment of each
thread of the warpgroup per PTX's table (ir/fragments.py). The instruction completes at
once: fence, commit and wait check that whole warpgroups run them."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ...ir.fragments import (
    DESCRIPTOR_SWIZZLE_SPAN,
    WARPGROUP,
    WGMMA_NS,
    descriptor_bits,
    descriptor_fields,
    kmajor_byte,
    mnmajor_byte,
    wgmma_accumulator,
)
from ...ir.kernel_wgmma import Wgmma, WgmmaCommit, WgmmaDescriptor, WgmmaFence, WgmmaWait
from ...ir.swizzle import swizzle_bytes
from .mma import reg_run, whole_warps
from .values import owned


def start(chunk):
    """The chunk's wgmma descriptors: descriptor variable -> the shared array it points into."""
    chunk.descriptor_arrays = {}


K_STEP = 16


def whole_warpgroups(chunk, mask, what) -> int:
    whole_warps(chunk, mask, what)
    if chunk.T % WARPGROUP:
        chunk.fail(f"{what} needs whole warpgroups of {WARPGROUP} threads; the block has {chunk.T}")
    return chunk.T // WARPGROUP


def exec_wgmma_descriptor(chunk, s: WgmmaDescriptor, mask):
    sh = chunk.sarr(s.array, "WgmmaDescriptor")
    try:
        bits = descriptor_bits(s.leading_bytes, s.stride_bytes, s.swizzle)
    except ValueError as e:
        chunk.fail(str(e))
    start = ((chunk.ev_int(s.offset, mask) * sh.elem_bytes) & 0x3FFFF) >> 4
    value = (np.asarray(start).astype(np.uint64) | np.uint64(bits)).view(np.int64)
    chunk.scopes[-1][s.name] = [np.int64, owned(value)]
    chunk.descriptor_arrays[s.name] = s.array


def operand(chunk, desc: str, rows: int, mask, what, mn_major: bool = False):
    """(blocks, warpgroups, rows, 16) float64: the K-major tile descriptor `desc` points at
    (`mn_major`: the tile stored with its rows' elements adjacent, mnmajor_byte)."""
    array = chunk.descriptor_arrays.get(desc)
    if array is None:
        chunk.fail(f"{what}: {desc} is not a shared-memory matrix descriptor (WgmmaDescriptor)")
    sh = chunk.sarr(array, what)
    if sh.elem_bytes != 2:
        chunk.fail(f"{what}: {array} holds {sh.ctype}; wgmma reads bf16 or f16 tiles")
    groups = chunk.T // WARPGROUP
    v = np.broadcast_to(chunk.ev_int(K.Var(desc), mask), chunk.shape).astype(np.int64).view(np.uint64)
    v = v.reshape(chunk.nb, groups, WARPGROUP)
    if (v != v[..., :1]).any():
        chunk.fail(f"{what}: descriptor {desc} differs between threads of a warpgroup")
    start, lead, stride, mode = (f.astype(np.int64) for f in descriptor_fields(v[..., 0]))
    modes = np.unique(mode)
    if len(modes) != 1:
        chunk.fail(f"{what}: descriptor {desc} has several swizzle modes")
    span = DESCRIPTOR_SWIZZLE_SPAN[int(modes[0])]
    r = np.arange(rows).reshape(rows, 1)
    k = np.arange(K_STEP).reshape(1, K_STEP)
    place = mnmajor_byte if mn_major else kmajor_byte
    if mn_major and not span:
        chunk.fail(f"{what}: an MN-major operand needs a swizzled descriptor (32, 64 or 128 bytes)")
    byte = start[..., None, None] + place(r, k, lead[..., None, None], stride[..., None, None], span)
    elem = swizzle_bytes(byte, span) // 2                 # (nb, groups, rows, 16)
    per = rows * K_STEP // WARPGROUP                      # each thread reads `per` of them
    off = elem.reshape(chunk.nb, chunk.T, per)
    got = [chunk.shared_read(sh, off[..., j], 1, mask, what)[0] for j in range(per)]
    vals = np.stack([np.broadcast_to(g, chunk.shape) for g in got], -1)
    return vals.reshape(chunk.nb, groups, rows, K_STEP).astype(np.float64)


def exec_wgmma(chunk, s: Wgmma, mask):
    groups = whole_warpgroups(chunk, mask, "wgmma.mma_async")
    if s.n not in WGMMA_NS or s.dtype not in ("bf16", "f16"):
        chunk.fail(f"wgmma m64n{s.n}k16.{s.dtype}: N a multiple of 8 up to 256, inputs bf16 or f16")
    a = operand(chunk, s.a_desc, 64, mask, "wgmma A")
    b = operand(chunk, s.b_desc, s.n, mask, "wgmma B", s.b_mn_major)
    prod = np.einsum("bgmk,bgnk->bgmn", a, b)           # exact: 16 products of halves
    nd = s.n // 2
    c, reg, i = reg_run(chunk, s.acc, s.acc_at, nd, mask, "wgmma D")
    if reg.data.dtype != np.float32:
        chunk.fail(f"wgmma D: {s.acc} must be a float register array")
    coords = np.array(wgmma_accumulator(s.n).coords)   # (128, nd, 2)
    d = c.reshape(chunk.nb, groups, WARPGROUP, nd) + prod[:, :, coords[..., 0], coords[..., 1]]
    reg.data[i:i + nd] = np.moveaxis(d.astype(np.float32).reshape(chunk.nb, chunk.T, nd), -1, 0)
    chunk.stats.float_multiplies += chunk.nb * groups * 64 * s.n * K_STEP


def exec_wgmma_sync(chunk, s, mask):
    """fence / commit_group / wait_group: Wgmma completes at once here; they check only that
    whole warpgroups execute them (hardware requires it)."""
    whole_warpgroups(chunk, mask, type(s).__name__)


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {
    WgmmaDescriptor: exec_wgmma_descriptor, Wgmma: exec_wgmma, WgmmaFence: exec_wgmma_sync,
    WgmmaCommit: exec_wgmma_sync, WgmmaWait: exec_wgmma_sync,
}
