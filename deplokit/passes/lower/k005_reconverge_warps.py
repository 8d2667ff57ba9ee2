"""k005 reconverge_warps: a `SyncWarp` (__syncwarp()) where, in a loop's body, a branch that
only some threads of a warp take is followed by a warp-collective operation (a Shuffle).

The flash kernel's key loop has thread 0 issue the next tile's copies (`if (tid == 0)`), then
adds its lanes' partial dot products by `__shfl_xor_sync`. nvcc cannot prove that the warp is
converged again at the shuffle, so it compiles the loop twice: the converged body and a
BRA.DIV fallback (2577 instead of 1857 FFMA in SASS). A `__syncwarp()` once the branch is
over tells it the warp is whole. The rule is the branch and the collective, not the kernel:
any If whose condition (or a nested If's) differs between threads, followed in the same
loop body by a statement that shuffles, with no Barrier or SyncWarp between.
"""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.kernel_ir import KernelProgram
from ..record import Noted, Pass


def apply(program: KernelProgram, pctx=None) -> KernelProgram:
    kernels, notes = [], []
    for k in program.kernels:
        placed: list[str] = []
        body = _statements(k.body, _thread_varying(k.body), placed, in_loop=False)
        if placed:
            k = dataclasses.replace(k, body=body)
            notes.append(f"{k.name}: __syncwarp() in loop {', '.join(placed)}: a branch taken by some threads of a "
                         f"warp comes before a warp shuffle (nvcc would keep a divergent copy of the code after it)")
        kernels.append(k)
    if not notes:
        return program
    return Noted(dataclasses.replace(program, kernels=tuple(kernels)), tuple(notes))


def _statements(body, varying: set[str], placed: list[str], in_loop: bool, loop: str = "") -> tuple:
    out, pending = [], False
    for s in body:
        if isinstance(s, K.For):
            s = dataclasses.replace(s, body=_statements(s.body, varying, placed, True, s.var))
        elif isinstance(s, K.If):
            s = dataclasses.replace(s, then=_statements(s.then, varying, placed, in_loop, loop),
                                    orelse=_statements(s.orelse, varying, placed, in_loop, loop))
        if isinstance(s, (K.Barrier, K.SyncWarp)):
            pending = False
        elif pending and _shuffles(s):
            out.append(K.SyncWarp())
            placed.append(loop)
            pending = False
        out.append(s)
        if in_loop and isinstance(s, K.If) and _diverges(s, varying):
            pending = True
    return tuple(out)


def _diverges(s: K.If, varying: set[str]) -> bool:
    """Some threads of a warp may take this branch (or one nested in it) and others not."""
    return any(isinstance(n, K.If) and K.varies(n.cond, varying) for n in K.walk_stmts((s,)))


def _shuffles(s) -> bool:
    return any(isinstance(x, K.Shuffle) for n in K.walk_stmts((s,)) for e in K.stmt_exprs(n) for x in K.subexprs(e))


def _thread_varying(body) -> set[str]:
    """Names that may hold different values in different threads (any of their writes does)."""
    varying: set[str] = set()
    stmts = list(K.walk_stmts(body))
    while True:
        before = len(varying)
        for s in stmts:
            if isinstance(s, K.Declare) and K.varies(s.init, varying):
                varying.add(s.name)
            elif isinstance(s, K.Assign) and (K.varies(s.value, varying) or K.varies(s.index, varying)):
                varying.add(s.name)
            elif isinstance(s, K.VectorLoad):
                varying.update(s.dsts)
        if len(varying) == before:
            return varying


PASS = Pass("005_reconverge_warps", "kernel",
            "__syncwarp() after a branch some threads of a warp skip, before a warp shuffle in the same loop", apply)
