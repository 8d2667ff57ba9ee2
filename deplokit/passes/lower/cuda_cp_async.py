"""cp.async copies printed as CUDA (inline PTX, so the instruction issued is on the page):
the Kernel-IR statements of ir/kernel_cp_async.py, each a function taking the renderer
(passes/lower/cuda.py's _Renderer, here `rd`, whose FEATURE_STATEMENTS table merges this
module's STATEMENTS) as its first argument; the renderer calls `check_target` before
anything prints.

`cp.async.{ca,cg}.shared.global` (sm_80+; `cg`, which bypasses L1, for 16 bytes; a half
buffer's elements are copied as bytes), `cp.async.commit_group`, `cp.async.wait_group N`."""
from __future__ import annotations

from ...ir.kernel_cp_async import CpAsync, CpAsyncCommit, CpAsyncWait


def check_target(rd, nodes) -> None:
    """cp.async needs sm_80, checked before anything prints."""
    if any(isinstance(n, (CpAsync, CpAsyncCommit, CpAsyncWait)) for n in nodes):
        rd.need_sm(80, "cp.async")


def render_cp_async(rd, s: CpAsync, scope) -> None:
    rd.need_sm(80, "cp.async")
    if s.nbytes not in (4, 8, 16):
        raise rd.err(f"cp.async of {s.nbytes} bytes; supported: 4, 8, 16")
    rd.float_param(s.buffer, "cp.async", halves=True)      # halves: copied as bytes
    kind = "cg" if s.nbytes == 16 else "ca"       # cg: through L2 only, 16 bytes
    dst = rd.shared_addr(f"{s.array}[{rd.expr(s.dst_offset, scope)}]")
    src = f"&{s.buffer}[{rd.expr(s.src_offset, scope)}]"
    rd.emit_asm([f"cp.async.{kind}.shared.global [%0], [%1], {s.nbytes};"],
                [f'"r"({dst})', f'"l"({src})'])


def render_cp_async_commit(rd, s: CpAsyncCommit, scope) -> None:
    rd.need_sm(80, "cp.async.commit_group")
    rd.emit_asm(["cp.async.commit_group;"], [])


def render_cp_async_wait(rd, s: CpAsyncWait, scope) -> None:
    rd.need_sm(80, "cp.async.wait_group")
    if not (isinstance(s.pending, int) and 0 <= s.pending <= 7):
        raise rd.err(f"cp.async.wait_group {s.pending!r}: pending groups must be 0..7")
    rd.emit_asm([f"cp.async.wait_group {s.pending};"], [])


# Kernel-IR statement -> the function that prints it (passes/lower/cuda.py's FEATURE_STATEMENTS)
STATEMENTS = {
    CpAsync: render_cp_async, CpAsyncCommit: render_cp_async_commit, CpAsyncWait: render_cp_async_wait,
}
