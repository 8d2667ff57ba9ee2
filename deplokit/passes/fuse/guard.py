"""The fusion guard: when inlining a producer into a kernel costs too much.

Work is what a kernel's loop nest executes: loads, arithmetic and accumulations, each
counted once per iteration of the loops around it. A value inlined where it is evaluated
more often than it has elements (a broadcast read, or a second phase of a kernel) adds
*extra* work. The guard allows a kernel whose extra work is at most RECOMPUTE_BUDGET times
its essential work, and never one that evaluates a reduction more than once per element.

A contraction (a matmul's sum of products) is held to CONTRACTION_BUDGET: a producer fused
into one of its operands is evaluated once per (m, k) for every output column n, inside the
K loop, so its work is multiplied by N (the evaluations the loop nest counts); stored, it
is computed once per element in its own elementwise kernel and read like any operand. The
K loop must keep at least three quarters of its work on the contraction itself: a scale or
a cast fits, a silu·mul does not.

Unless the prologue is staged: a prologue of one operand alone (its values vary along K and
that operand's output axis only: silu(gate)·up of A[m, k]) is applied while the operand's
slab is copied into shared memory (007 records it on the Stage), so it is evaluated once
per staged element, and each element is staged once per block along the other output axis
(STAGED_TILE columns a block, at most: the recompute across N-blocks). The guard counts
that recompute against the same budget; a prologue too heavy for it stays a kernel of its
own.
"""
from __future__ import annotations

from dataclasses import dataclass

RECOMPUTE_BUDGET = 1.0
CONTRACTION_BUDGET = 1 / 3   # extra <= 1/3 x essential: >= 3/4 of the K loop is the contraction
# the narrowest block tile along the output axis a staged prologue's operand is shared
# across (005/008: 64 or 128 columns at the default register block): the guard's bound on
# the N-blocks (or M-blocks) that each stage the element again
STAGED_TILE = 64


@dataclass(frozen=True)
class Verdict:
    node: str | None      # the producer to materialise, None when the kernel passes
    reason: str


def judge(kernel_name: str, evals: dict[str, int], numel: dict[str, int], reduction_points: dict[str, int],
          reduction_instances: dict[str, int], total_work: int, order: dict[str, int],
          contraction: bool = False, shared_along: dict[str, int] | None = None) -> Verdict:
    """evals: executions of each inlined node's statements; reduction_points: evaluations of
    each fused reduction; reduction_instances: how many places compute it; order: program
    order of the Tensor-IR nodes; contraction: the kernel is a matmul (M, N, K roles);
    shared_along: a one-operand prologue node -> the extent of the output axis it does not
    vary along (build.BuiltKernel.shared_along)."""
    for red, count in reduction_instances.items():
        if count > 1:
            return Verdict(red, f"reduction {red} would be computed {count} times in {kernel_name}")
    for red, points in reduction_points.items():
        if points > numel[red]:
            # Store the last recomputed value on the way from the reduction to the root: the
            # reduction and everything it feeds then stay one kernel (softmax before a matmul).
            recomputed = [n for n, e in {**evals, **reduction_points}.items() if e > numel[n]]
            last = max(recomputed, key=order.__getitem__)
            return Verdict(last, f"reduction {red} would be recomputed {points // numel[red]}x per element "
                                 f"in {kernel_name}; storing {last}")
    extra = {n: e - numel[n] for n, e in evals.items() if e > numel[n]}
    total_extra = sum(extra.values())
    essential = total_work - total_extra
    budget, what = (CONTRACTION_BUDGET, "contraction work") if contraction else (RECOMPUTE_BUDGET, "essential")
    if extra and total_extra > budget * essential and contraction:
        staged = staged_extra(extra, evals, numel, shared_along or {})
        if staged is not None and staged <= budget * essential:
            names = sorted(extra, key=order.__getitem__)
            along = (shared_along or {})[names[-1]]
            return Verdict(None, f"staged prologue {', '.join(names)}: applied while staging its operand's slab, "
                                 f"once per element per block of {STAGED_TILE} of the {along} columns it is "
                                 f"shared by ({-(-along // STAGED_TILE)}x): extra work {staged} <= {budget:.3g} x "
                                 f"{what} {essential} (in the K loop: {total_extra}); {names[-1]} "
                                 f"({numel[names[-1]]} elements) never goes through global memory")
        if staged is not None:
            last = max(extra, key=order.__getitem__)
            return Verdict(last, f"{last} would be evaluated {evals[last] / numel[last]:.3g}x per element as a "
                                 f"prologue of contraction {kernel_name}, staged "
                                 f"{staged / sum(numel[n] for n in extra) + 1:.3g}x: extra work {staged} > "
                                 f"{budget:.3g} x {what} {essential}; computed once in its own kernel")
    if extra and total_extra > budget * essential:
        # Cut at the last recomputed value: what feeds it is then computed once, in its
        # own kernel (rope before the attention matmul, not the halves of its cat; silu·mul
        # before down_proj, as one elementwise kernel out of the K loop).
        last = max(extra, key=order.__getitem__)
        where = "as a prologue of contraction " if contraction else "in "
        return Verdict(last, f"{last} would be evaluated {evals[last] / numel[last]:.3g}x per element {where}"
                             f"{kernel_name}: extra work {total_extra} > {budget:.3g} x {what} {essential}; "
                             f"computed once in its own kernel")
    if extra and contraction:
        return Verdict(None, f"prologue {', '.join(sorted(extra, key=order.__getitem__))} stays in the K loop: "
                             f"extra work {total_extra} <= {budget:.3g} x {what} {essential}")
    return Verdict(None, f"{kernel_name}: extra work {total_extra} <= {budget:.3g} x {what} {essential}")


def staged_extra(extra: dict[str, int], evals: dict[str, int], numel: dict[str, int],
                 shared_along: dict[str, int]) -> int | None:
    """The extra work of the prologue nodes in `extra` when they are staged with their
    operand's slab: each evaluated once per element per block along the axis it is shared
    by (at most STAGED_TILE wide), or None when one of them is not a one-operand prologue."""
    if not extra or any(n not in shared_along for n in extra):
        return None
    total = 0
    for n in extra:
        along = shared_along[n]
        per_column = evals[n] // along          # evaluations that do not depend on the column
        total += max(0, per_column * -(-along // STAGED_TILE) - numel[n])
    return total


def compounding_copies(inlined: dict[str, frozenset], producers: dict[str, tuple[str, ...]], stored: set,
                       order: dict[str, int], free: frozenset = frozenset()) -> list[tuple[str, str]]:
    """Values to store because their copies compound across kernels: a value inlined into
    two or more kernels is computed once in each, which is cheap; but when one of its own
    producers is also inlined into several kernels, every copy of the outer value recomputes
    the inner one. Down a residual stream (x1 = x0 + attn, x2 = x1 + mlp, ...) each layer's
    norm would recompute the whole stream from the embedding. Store the inner value.
    `inlined`: kernel -> the Tensor-IR nodes it computes; `free`: nodes that cost nothing to
    recompute (a half input's convert: part of its load), never stored; returns [(node, reason)]."""
    copies: dict[str, list[str]] = {}
    for kernel in sorted(inlined):
        for node in inlined[kernel]:
            if node not in stored:
                copies.setdefault(node, []).append(kernel)
    shared = {n for n, ks in copies.items() if len(ks) > 1}
    out: dict[str, str] = {}
    for outer in sorted(shared, key=order.__getitem__):
        seen, todo = set(), list(producers.get(outer, ()))
        while todo:
            node = todo.pop()
            if node in seen or node in stored or node not in order:
                continue
            seen.add(node)
            if node in shared and node not in out and node not in free:
                out[node] = (f"{node} is computed in {len(copies[node])} kernels and inside {outer}, itself "
                             f"computed in {len(copies[outer])}: the copies would compound")
            todo.extend(producers.get(node, ()))
    return sorted(out.items(), key=lambda item: order[item[0]])


@dataclass(frozen=True)
class Traffic:
    """What a kernel (or a chain of kernels) moves through global memory and computes:
    `bytes` as its loads and stores execute (no reuse beyond what the schedule guarantees),
    `flops` as analysis counts them."""
    bytes: int
    flops: int


def fusion_pays(what: str, fused: Traffic, unfused: Traffic) -> tuple[bool, str]:
    """A fusion must never make a program slower than not fusing it: it goes ahead only when
    it moves no more bytes and does no more work than the kernels it replaces."""
    ratio = f"{fused.bytes / unfused.bytes:.3g}x" if unfused.bytes else "n/a"
    verdict = (f"{what} moves {fused.bytes} bytes and does {fused.flops} flops; unfused {unfused.bytes} "
               f"bytes and {unfused.flops} flops ({ratio} the bytes)")
    wins = fused.bytes <= unfused.bytes and fused.flops <= unfused.flops
    return wins, verdict
