"""Proxy fences: a TMA copy works in the async proxy, ordinary loads and stores in the generic
proxy, and the two are not ordered with each other by a barrier alone. Where a thread's
ordinary store into shared memory precedes an async-proxy access of the same array (a TMA
copy refilling a slot that was zero-filled or written by the threads), the thread fences
(fence.proxy.async.shared::cta) right after its store, before whatever barrier hands the
memory to the copy's issuer. The stage rings' own slots are written by TMA alone and need
none (a slot's generic reads are ordered by its empty mbarrier)."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.kernel_tma import ProxyFence, TmaLoad


def _stored_array(s) -> str | None:
    if isinstance(s, K.SharedStore):
        return s.array
    if isinstance(s, K.VectorStore) and s.space == "shared":
        return s.target
    return None


def fence_generic_stores(func: K.KernelFunc) -> K.KernelFunc:
    """`func` with a ProxyFence after every ordinary store into an array a TMA copy writes."""
    async_arrays = {s.array for s in K.walk_stmts(func.body) if isinstance(s, TmaLoad)}
    if not async_arrays or not any(_stored_array(s) in async_arrays for s in K.walk_stmts(func.body)):
        return func

    def fence(body):
        out = []
        for i, s in enumerate(body):
            if isinstance(s, K.For):
                s = dataclasses.replace(s, body=fence(s.body))
            elif isinstance(s, K.If):
                s = dataclasses.replace(s, then=fence(s.then), orelse=fence(s.orelse))
            out.append(s)
            nxt = body[i + 1] if i + 1 < len(body) else None
            if _stored_array(s) in async_arrays and not isinstance(nxt, ProxyFence):
                out.append(ProxyFence())
        return tuple(out)

    return dataclasses.replace(func, body=fence(func.body))
