"""The simulator's tensor-core instructions (an advanced feature: passes/mma/): the warp-wide
Kernel-IR statements LdMatrix, Tf32Round and Mma with PTX's lane maps (runtime/warp_mma.py),
each run by a function taking the chunk (sim/exec.py's Chunk, whose FEATURE_STATEMENTS table
merges this module's STATEMENTS) as its first argument."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from ...ir.fragments import SHAPES as MMA_SHAPES
from ...ir.kernel_mma import LdMatrix, Mma, PackHalves, Tf32Round
from ..warp_mma import half_bits, half_values, ldmatrix, mma_sync, tf32_round
from .memory import RegArray
from .values import uniform_value


def whole_warps(chunk, mask, what):
    """(warps, 32) of the block: a warp-wide instruction needs every lane of every warp."""
    if chunk.T % 32:
        chunk.fail(f"{what} needs whole warps; the block has {chunk.T} threads")
    if mask is not None and not np.broadcast_to(mask, chunk.shape).all():
        idle = ~np.broadcast_to(mask, chunk.shape)
        chunk.fail(f"{what} executed by only some lanes of a warp ({chunk.where(idle)} skips it)")
    return chunk.T // 32


def active_warps(chunk, mask, what):
    """whole_warps for ldmatrix and mma.sync, which may also be skipped by whole warps (a block
    whose loop ended before its neighbours'): each warp runs it with all its lanes or none."""
    if chunk.T % 32:
        chunk.fail(f"{what} needs whole warps; the block has {chunk.T} threads")
    if mask is not None:
        lanes = np.broadcast_to(mask, chunk.shape).reshape(chunk.nb, chunk.T // 32, 32)
        split = lanes.any(-1) & ~lanes.all(-1)
        if split.any():
            idle = np.repeat(split, 32, -1).reshape(chunk.shape) & ~np.broadcast_to(mask, chunk.shape)
            chunk.fail(f"{what} executed by only some lanes of a warp ({chunk.where(idle)} skips it)")
    return chunk.T // 32


def write_run(chunk, reg, i, values, mask):
    """Registers i .. of the threads that run the instruction (whole warps) set to `values`."""
    if mask is None:
        reg.data[i:i + values.shape[0]] = values
    else:
        np.copyto(reg.data[i:i + values.shape[0]], values, where=np.broadcast_to(mask, chunk.shape))


def reg_array(chunk, name, what) -> RegArray:
    entry = chunk.lookup(name)[name]
    if not isinstance(entry, RegArray):
        chunk.fail(f"{what}: {name} is not a register array")
    return entry


def reg_run(chunk, name, at, n, mask, what):
    """Register array `name`'s elements at .. at+n-1 (at the same for every thread) as
    (blocks, warps, 32, n), and the array and first index."""
    reg = reg_array(chunk, name, what)
    i = uniform_value(chunk.ev_int(at, mask))
    if i is None or not 0 <= i <= reg.data.shape[0] - n:
        chunk.fail(f"{what}: {name}[{i} +{n}] is not a fixed run of its {reg.data.shape[0]} registers")
    run = np.moveaxis(np.broadcast_to(reg.data[i:i + n], (n,) + chunk.shape), 0, -1)
    return run.reshape(chunk.nb, chunk.T // 32, 32, n), reg, i


def exec_ldmatrix(chunk, s: LdMatrix, mask):
    w = active_warps(chunk, mask, "ldmatrix")
    sh = chunk.sarr(s.array, "LdMatrix")
    if sh.data.dtype != np.float32:
        chunk.fail(f"ldmatrix from {s.array}, an array of {sh.ctype}: 32-bit words or halves")
    per_row = 16 // sh.elem_bytes                    # a row is 16 bytes: 4 words or 8 halves
    off = np.broadcast_to(chunk.ev_int(s.offset, mask), chunk.shape)
    rows = np.stack([np.broadcast_to(v, chunk.shape)
                     for v in chunk.shared_read(sh, off, per_row, mask, "LdMatrix")], -1)
    got = ldmatrix(rows.reshape(chunk.nb, w, 32, per_row), s.num, s.trans)   # (nb, w, 32, num, 1 or 2)
    reg = reg_array(chunk, s.dst, "ldmatrix")
    if (reg.data.dtype == np.uint32) != (per_row == 8):
        chunk.fail(f"ldmatrix of {sh.ctype} into {s.dst}: halves go to packed (b32) registers, words to float")
    if per_row == 8:                 # two halves a register, the first in the low 16 bits
        bits = half_bits(got, sh.ctype)
        got = bits[..., 0] | (bits[..., 1] << np.uint32(16))
    i = uniform_value(chunk.ev_int(s.index, mask))
    if i is None or not 0 <= i <= reg.data.shape[0] - s.num:
        chunk.fail(f"ldmatrix into {s.dst}[{i} +{s.num}]: not a fixed run of its registers")
    write_run(chunk, reg, i, np.moveaxis(got.reshape(chunk.nb, chunk.T, s.num), -1, 0).astype(reg.data.dtype), mask)


def exec_tf32_round(chunk, s: Tf32Round, mask):
    reg = reg_array(chunk, s.dst, "cvt.rna.tf32.f32")
    idx = chunk.ev_int(s.index, mask)
    chunk.reg_store(s.dst, reg, idx, tf32_round(chunk.e_reg_load(K.RegLoad(s.dst, s.index), mask)), mask)


def exec_mma(chunk, s: Mma, mask):
    active_warps(chunk, mask, "mma.sync")
    shape = MMA_SHAPES.get(s.shape)
    if shape is None:
        chunk.fail(f"unknown mma shape {s.shape!r}")
    per = shape.per_reg
    a, ra, _ = reg_run(chunk, s.a, s.a_at, shape.elements("A") // per, mask, "mma.sync A")
    b, rb, _ = reg_run(chunk, s.b, s.b_at, shape.elements("B") // per, mask, "mma.sync B")
    if per == 2:                     # packed halves: element 2j is register j's low 16 bits
        if ra.data.dtype != np.uint32 or rb.data.dtype != np.uint32:
            chunk.fail(f"mma.sync {s.shape}: A and B must be packed (b32) registers of two halves")
        a, b = (half_values(x, shape.dtype) for x in (a, b))
    c, reg, i = reg_run(chunk, s.acc, s.acc_at, 4, mask, "mma.sync C")
    d = mma_sync(shape, a, b, c)
    write_run(chunk, reg, i, np.moveaxis(d.reshape(chunk.nb, chunk.T, 4), -1, 0).astype(reg.data.dtype), mask)
    runs = chunk.nb * (chunk.T // 32) if mask is None else chunk.count(mask) // 32
    chunk.stats.float_multiplies += runs * shape.m * shape.n * shape.k


def exec_pack_halves(chunk, s: PackHalves, mask):
    reg = reg_array(chunk, s.dst, f"pack.{s.kind}x2")
    if reg.data.dtype != np.uint32:
        chunk.fail(f"pack.{s.kind}x2 into {s.dst}: halves go to packed (b32) registers")
    lo, hi = (half_bits(np.broadcast_to(chunk.ev(e, mask), chunk.shape), s.kind) for e in (s.lo, s.hi))
    chunk.reg_store(s.dst, reg, chunk.ev_int(s.index, mask), lo | (hi << np.uint32(16)), mask)


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {
    LdMatrix: exec_ldmatrix, Tf32Round: exec_tf32_round, Mma: exec_mma, PackHalves: exec_pack_halves,
}
