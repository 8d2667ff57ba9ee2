"""Hopper's warpgroup MMA printed as CUDA (inline PTX): the Kernel-IR statements
WgmmaDescriptor, WgmmaFence, Wgmma, WgmmaCommit and WgmmaWait, each a function taking the
renderer (passes/lower/cuda.py's _Renderer, here `rd`, whose FEATURE_STATEMENTS table
merges this module's STATEMENTS) as its first argument. wgmma exists only in sm_90a's PTX: a kernel using it
is compiled for the architecture-specific target (kernel_ir.uses_wgmma)."""
from __future__ import annotations

from ...ir.fragments import WGMMA_NS, descriptor_bits
from ...ir.kernel_ir import SharedArray, walk_stmts
from ...ir.kernel_wgmma import SetMaxNReg, Wgmma, WgmmaCommit, WgmmaDescriptor, WgmmaFence, WgmmaWait
from ...ir.swizzle import REPEAT
from ...ir.warp_roles import setmaxnreg_reason
from ..mma.cuda_mma import reg_at

DTYPES = ("bf16", "f16")


def render_wgmma_descriptor(rd, s: WgmmaDescriptor, scope) -> None:
    rd.need_sm(90, "wgmma")
    try:
        bits = descriptor_bits(s.leading_bytes, s.stride_bytes, s.swizzle)
    except ValueError as e:
        raise rd.err(str(e)) from None
    # a swizzled tile starts on a repeat of its pattern (the descriptor's base offset is 0)
    arrays = [a for a in walk_stmts(rd.k.body) if isinstance(a, SharedArray) and a.name == s.array]
    if s.swizzle and (not arrays or arrays[0].align % REPEAT[s.swizzle]):
        raise rd.err(f"wgmma descriptor {s.name}: shared {s.array} must be aligned to "
                     f"{REPEAT[s.swizzle]} bytes for its {s.swizzle}B swizzle")
    addr = rd.shared_addr(f"{s.array}[{rd.expr(s.offset, scope)}]")
    rd.emit(f"// {s.name}: K-major, leading {s.leading_bytes}B, stride {s.stride_bytes}B, "
            f"swizzle {s.swizzle}B (pattern every {REPEAT[s.swizzle]}B)")
    rd.emit(f"const unsigned long long {s.name} = 0x{bits:016x}ull | "
            f"(unsigned long long)(({addr} & 0x3FFFF) >> 4);")
    scope.declare(s.name, "u64")


def render_wgmma_fence(rd, s: WgmmaFence, scope) -> None:
    rd.need_sm(90, "wgmma.fence")
    rd.emit_asm(["wgmma.fence.sync.aligned;"], [])


def render_wgmma_commit(rd, s: WgmmaCommit, scope) -> None:
    rd.need_sm(90, "wgmma.commit_group")
    rd.emit_asm(["wgmma.commit_group.sync.aligned;"], [])


def render_wgmma_wait(rd, s: WgmmaWait, scope) -> None:
    rd.need_sm(90, "wgmma.wait_group")
    rd.emit_asm([f"wgmma.wait_group.sync.aligned {int(s.pending)};"], [])


def render_wgmma(rd, s: Wgmma, scope) -> None:
    rd.need_sm(90, "wgmma.mma_async")
    if s.n not in WGMMA_NS or s.dtype not in DTYPES:
        raise rd.err(f"wgmma m64n{s.n}k16.{s.dtype}: N a multiple of 8 up to 256, inputs bf16 or f16")
    nd = s.n // 2
    regs = "{" + ", ".join(f"%{i}" for i in range(nd)) + "}"
    # scale-d = 1 (accumulate), A and B scaled by 1, A K-major; B transposed (imm-trans-b 1)
    # where it is stored MN-major
    template = ["{", ".reg .pred p;", "setp.ne.b32 p, 1, 0;",
                f"wgmma.mma_async.sync.aligned.m64n{s.n}k16.f32.{s.dtype}.{s.dtype} "
                f"{regs}, %{nd}, %{nd + 1}, p, 1, 1, 0, {int(s.b_mn_major)};", "}"]
    outs = [f'"+f"({reg_at(rd, s.acc, s.acc_at, i, scope)})' for i in range(nd)]
    rd.emit_asm(template, [f'"l"({s.a_desc})', f'"l"({s.b_desc})'], outs)


def render_setmaxnreg(rd, s: SetMaxNReg, scope) -> None:
    rd.need_sm(90, "setmaxnreg")
    why = setmaxnreg_reason(s.count)
    if why:
        raise rd.err(why)
    if not rd.k.min_blocks:
        raise rd.err("setmaxnreg needs __launch_bounds__ with a minimum block count (ptxas drops it "
                     "when the register count at entry is unknown)")
    rd.emit_asm([f"setmaxnreg.{'inc' if s.inc else 'dec'}.sync.aligned.u32 {s.count};"], [])


# Kernel-IR statement -> the function that prints it (passes/lower/cuda.py's FEATURE_STATEMENTS)
STATEMENTS = {
    WgmmaDescriptor: render_wgmma_descriptor, WgmmaFence: render_wgmma_fence, Wgmma: render_wgmma,
    WgmmaCommit: render_wgmma_commit, WgmmaWait: render_wgmma_wait, SetMaxNReg: render_setmaxnreg,
}
