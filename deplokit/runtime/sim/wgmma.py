"""The simulator's warpgroup MMA (an advanced feature: passes/wgmma/): the Kernel-IR
statements WgmmaDescriptor, WgmmaFence, Wgmma, WgmmaCommit, WgmmaWait and SetMaxNReg, each run by a
function taking the chunk (sim/exec.py's Chunk, whose FEATURE_STATEMENTS table merges
this module's STATEMENTS) as its first argument.

A descriptor is the 64-bit value PTX defines, its start address counted from the start of
its shared array (arrays here have no common address space; a swizzled array starts on a
repeat of its pattern, as the renderer's do). Wgmma decodes its two descriptors, reads
A (64 x 16) and B (n x 16, K-major) from shared memory where hardware would (through the
swizzle, ir/swizzle.py), adds the exact products in FP32 and writes the D fragment of each
thread of the warpgroup per PTX's table (ir/fragments.py). It does so when a
wgmma.wait_group retires the wgmma's commit group (the latest moment PTX allows), not at
issue: a slot the kernel releases or refills before that is read after the refill (or
caught as data not yet landed). Fence, commit and wait run on whole warpgroups."""
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
from ...ir.kernel_wgmma import SetMaxNReg, Wgmma, WgmmaCommit, WgmmaDescriptor, WgmmaFence, WgmmaWait
from ...ir.swizzle import swizzle_bytes
from ...ir.warp_roles import entry_registers, setmaxnreg_reason
from .mma import reg_run
from .values import owned


def start(chunk):
    """The chunk's wgmma descriptors: descriptor variable -> the shared array it points into;
    the registers a thread of each warpgroup holds (setmaxnreg; None until the first)."""
    chunk.descriptor_arrays = {}
    chunk.warpgroup_regs = None


K_STEP = 16


def whole_warpgroups(chunk, mask, what):
    """The warpgroups (indices) that run a warpgroup-wide statement: every thread of each, and
    the same ones in every block (a warp-specialised producer warpgroup skips the consumers')."""
    if chunk.T % WARPGROUP:
        chunk.fail(f"{what} needs whole warpgroups of {WARPGROUP} threads; the block has {chunk.T}")
    groups = chunk.T // WARPGROUP
    if mask is None:
        return np.arange(groups)
    act = np.broadcast_to(mask, chunk.shape).reshape(chunk.nb, groups, WARPGROUP)
    on = act.all(axis=-1)
    if (act.any(axis=-1) != on).any() or (on != on[:1]).any():
        chunk.fail(f"{what} executed by only some threads of a warpgroup, or by other warpgroups in "
                   f"different blocks ({chunk.where(~np.broadcast_to(mask, chunk.shape))} skips it)")
    return np.nonzero(on[0])[0]


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


def descriptor(chunk, desc: str, mask, groups, what):
    """(shared array, per (block, active warpgroup) descriptor values) of `desc`, read at issue."""
    array = chunk.descriptor_arrays.get(desc)
    if array is None:
        chunk.fail(f"{what}: {desc} is not a shared-memory matrix descriptor (WgmmaDescriptor)")
    sh = chunk.sarr(array, what)
    if sh.elem_bytes != 2:
        chunk.fail(f"{what}: {array} holds {sh.ctype}; wgmma reads bf16 or f16 tiles")
    v = np.broadcast_to(chunk.ev_int(K.Var(desc), mask), chunk.shape).astype(np.int64).view(np.uint64)
    v = v.reshape(chunk.nb, chunk.T // WARPGROUP, WARPGROUP)[:, groups]
    if (v != v[..., :1]).any():
        chunk.fail(f"{what}: descriptor {desc} differs between threads of a warpgroup")
    return sh, v[..., 0]


def operand(chunk, sh, v, rows: int, mask, groups, what, mn_major: bool = False):
    """(blocks, active warpgroups, rows, 16) float64: the K-major tile descriptor values `v`
    point at in `sh` (`mn_major`: the tile stored with its rows' elements adjacent,
    mnmajor_byte), read now (when the wgmma reads it: at the wait that retires it)."""
    start, lead, stride, mode = (f.astype(np.int64) for f in descriptor_fields(v))
    modes = np.unique(mode)
    if len(modes) != 1:
        chunk.fail(f"{what}: descriptor has several swizzle modes")
    span = DESCRIPTOR_SWIZZLE_SPAN[int(modes[0])]
    r = np.arange(rows).reshape(rows, 1)
    k = np.arange(K_STEP).reshape(1, K_STEP)
    place = mnmajor_byte if mn_major else kmajor_byte
    if mn_major and not span:
        chunk.fail(f"{what}: an MN-major operand needs a swizzled descriptor (32, 64 or 128 bytes)")
    byte = start[..., None, None] + place(r, k, lead[..., None, None], stride[..., None, None], span)
    elem = swizzle_bytes(byte, span) // 2                 # (nb, active groups, rows, 16)
    per = rows * K_STEP // WARPGROUP                      # each thread reads `per` of them
    full = np.zeros((chunk.nb, chunk.T // WARPGROUP, WARPGROUP * per), dtype=np.int64)
    full[:, groups] = elem.reshape(chunk.nb, len(groups), WARPGROUP * per)
    off = full.reshape(chunk.nb, chunk.T, per)
    got = [chunk.shared_read(sh, off[..., j], 1, mask, what)[0] for j in range(per)]
    vals = np.stack([np.broadcast_to(g, chunk.shape) for g in got], -1)
    vals = vals.reshape(chunk.nb, chunk.T // WARPGROUP, rows, K_STEP)[:, groups]
    return vals.astype(np.float64)


def exec_wgmma(chunk, s: Wgmma, mask):
    """Issue: the descriptors and the accumulator run are taken now; the operands are read
    and added when a wait_group retires the wgmma's group (PTX lets it read them any time
    until then), so a slot released or refilled too early is read wrong or caught pending."""
    groups = whole_warpgroups(chunk, mask, "wgmma.mma_async")
    if s.n not in WGMMA_NS or s.dtype not in ("bf16", "f16"):
        chunk.fail(f"wgmma m64n{s.n}k16.{s.dtype}: N a multiple of 8 up to 256, inputs bf16 or f16")
    a = descriptor(chunk, s.a_desc, mask, groups, "wgmma A")
    b = descriptor(chunk, s.b_desc, mask, groups, "wgmma B")
    nd = s.n // 2
    _, reg, i = reg_run(chunk, s.acc, s.acc_at, nd, mask, "wgmma D")
    if reg.data.dtype != np.float32:
        chunk.fail(f"wgmma D: {s.acc} must be a float register array")
    pending(chunk)[0].append((s, a, b, reg, i, mask, groups))


def pending(chunk) -> list:
    """[uncommitted wgmmas, committed group, ...] of the chunk (oldest group first)."""
    if getattr(chunk, "wgmma_groups", None) is None:
        chunk.wgmma_groups = [[]]
    return chunk.wgmma_groups


def retire(chunk, issued):
    s, (sa, va), (sb, vb), reg, i, mask, groups = issued
    a = operand(chunk, sa, va, 64, mask, groups, "wgmma A")
    b = operand(chunk, sb, vb, s.n, mask, groups, "wgmma B", s.b_mn_major)
    prod = np.einsum("bgmk,bgnk->bgmn", a, b)           # exact: 16 products of halves
    nd = s.n // 2
    coords = np.array(wgmma_accumulator(s.n).coords)   # (128, nd, 2)
    c = np.moveaxis(np.broadcast_to(reg.data[i:i + nd], (nd,) + chunk.shape), 0, -1)
    c = c.reshape(chunk.nb, chunk.T // WARPGROUP, WARPGROUP, nd)[:, groups]
    d = (c + prod[:, :, coords[..., 0], coords[..., 1]]).astype(np.float32)    # (nb, g, 128, nd)
    out = np.moveaxis(np.broadcast_to(reg.data[i:i + nd], (nd,) + chunk.shape), 0, -1).copy()
    out = out.reshape(chunk.nb, chunk.T // WARPGROUP, WARPGROUP, nd)
    out[:, groups] = d
    reg.data[i:i + nd] = np.moveaxis(out.reshape(chunk.nb, chunk.T, nd), -1, 0)
    chunk.stats.float_multiplies += chunk.nb * len(groups) * 64 * s.n * K_STEP


def exec_wgmma_sync(chunk, s, mask):
    """fence: whole warpgroups. commit_group closes the open group; wait_group N retires
    (reads and adds) all but the newest N committed groups."""
    whole_warpgroups(chunk, mask, type(s).__name__)
    groups = pending(chunk)
    if isinstance(s, WgmmaCommit):
        groups.insert(0, [])
    elif isinstance(s, WgmmaWait):
        if groups[0]:
            chunk.fail("wgmma.wait_group with wgmma not committed (wgmma.commit_group first)")
        while len(groups) - 1 > s.pending:
            for issued in groups.pop():
                retire(chunk, issued)


def exec_setmaxnreg(chunk, s: SetMaxNReg, mask):
    """Whole warpgroups set their threads' register count: a multiple of 8 in [24, 256], up
    (inc) or down (dec) from the count they hold, and the block's warpgroups together within
    what the launch gave it (threads x entry_registers under __launch_bounds__(T, min_blocks);
    with no min_blocks ptxas cannot tell the entry count and drops setmaxnreg)."""
    what = f"setmaxnreg.{'inc' if s.inc else 'dec'} {s.count}"
    groups = whole_warpgroups(chunk, mask, what)
    why = setmaxnreg_reason(s.count)
    if why:
        chunk.fail(why)
    if not chunk.k.min_blocks:
        chunk.fail(f"{what}: the kernel has no minimum-blocks launch bound, so the register count at entry "
                   f"is unknown (ptxas drops setmaxnreg)")
    entry = entry_registers(chunk.T, chunk.k.min_blocks)
    if chunk.warpgroup_regs is None:
        chunk.warpgroup_regs = np.full(chunk.T // WARPGROUP, entry, dtype=np.int64)
    held = chunk.warpgroup_regs[groups]
    if (s.count < held).any() if s.inc else (s.count > held).any():
        chunk.fail(f"{what}: warpgroups {groups.tolist()} hold {held.tolist()} registers a thread; "
                   f"{'inc' if s.inc else 'dec'} must not go {'down' if s.inc else 'up'}")
    chunk.warpgroup_regs[groups] = s.count
    total = int(chunk.warpgroup_regs.sum()) * WARPGROUP
    if total > chunk.T * entry:
        chunk.fail(f"{what}: the warpgroups would hold {total} registers ({chunk.warpgroup_regs.tolist()} a "
                   f"thread), more than the {chunk.T} x {entry} = {chunk.T * entry} the launch gave the block")


# Kernel-IR statement -> the function that runs it (sim/exec.py's FEATURE_STATEMENTS)
STATEMENTS = {
    WgmmaDescriptor: exec_wgmma_descriptor, Wgmma: exec_wgmma, WgmmaFence: exec_wgmma_sync,
    WgmmaCommit: exec_wgmma_sync, WgmmaWait: exec_wgmma_sync, SetMaxNReg: exec_setmaxnreg,
}
