"""The main loop of a kernel as nvcc will issue it, predicted from the Kernel IR.

For a matmul the K loop is where the time goes: per iteration a thread waits for its stage,
issues the next stage's copies and runs TM x TN x BK multiply-adds off shared memory. What
it costs in issue slots is not the multiply-adds alone: shared loads (one LDS.128 moves four
floats where four LDS move one each), copies (a 1-D bulk copy takes about a dozen uniform
instructions around its UBLKCP), waits and the loop's own bookkeeping. This module predicts
those counts, per thread and per iteration, the way the SASS view (analysis/sass.py) counts
them in the machine code:

    main loop   the deepest loop nvcc keeps that does floating-point work (loops marked
                unroll, and constant loops without a barrier whose unrolled body is small,
                FULL_UNROLL, are unrolled into it, as nvcc does; a kept loop is counted per
                pass of its partial unroll, unroll_factor)
    FFMA        an `add` of a `multiply`'s result (nvcc contracts them)
    LDS widths  the distinct shared addresses one unrolled iteration reads, per array, cut
                into aligned runs of 4 (LDS.128), 2 (LDS.64) and single floats, for every
                sampled thread and iteration (nvcc must prove the alignment for all)
    overhead    constants read off sm_90 SASS of deplokit's kernels (tune/sass_model/loop_overhead.py)
    K step      a main loop nested in a kept K loop (an inner k loop nvcc keeps) also pays its
                share of the K loop's own step (waits, copies, the TMA producer) per pass

`static` counts every instruction once, as the SASS listing does; `issue` weights a branch
one thread takes (the TMA producer under an elected `if tid.x == 0`) by the share of warps
that run it: per K step, what every warp issues plus the producer's slots / warps, as
analysis/sass_issue.py splits the machine code. `producer` is those slots, unweighted.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...analysis.sass import SharedLoadCounts
from ...ir import kernel_ir as K
from ...ir.kernel_cp_async import CpAsync, CpAsyncWait
from ...ir.kernel_tma import MbarrierArrive, MbarrierWait, TmaLoad, TmaTensorLoad
from ...ir.ops import OPS
from ...ir.tensor_ir import ELEMENTWISE_OPS
from .loop_addresses import compile_int, evaluate, vector_runs
from .loop_overhead import OVERHEAD
from .loop_unroll import (
    FULL_UNROLL,
    PARTIAL_UNROLL,
    const_int,
    sub_expressions,
    trip_count,
    unroll_factor,
    unrolled,
    walk_kinds,
)

# statement -> (what it counts as, its OVERHEAD entry)
SYNC_AND_COPY = {CpAsync: ("copies", "cp_async"), TmaLoad: ("copies", "tma"), TmaTensorLoad: ("copies", "tma"),
                 K.Barrier: ("barriers", ""),
                 CpAsyncWait: ("barriers", "cp_async_wait"), MbarrierWait: ("barriers", "mbarrier_wait"),
                 MbarrierArrive: ("barriers", "mbarrier_arrive")}
FLOAT_CALLS = set(ELEMENTWISE_OPS)        # each at least one FP32 / SFU instruction; slow ones more:
SLOW_CALLS = {name: op.slots for name, op in OPS.items() if op.slots}       # ir/ops.py


@dataclass(frozen=True)
class MainLoop(SharedLoadCounts):
    """Per thread, per pass of the kernel's main loop (counts of instructions; a pass runs
    `unroll` iterations of the loop)."""
    kernel: str
    var: str                    # the loop variable
    trips: int                  # iterations
    unroll: int                 # iterations per pass (nvcc's partial unroll)
    passes: int                 # passes one thread makes (the kept loops around included)
    ffma: int
    float_ops: int              # FP32/SFU instructions besides the FFMA
    lds: int                    # shared loads by width (instructions)
    lds64: int
    lds128: int
    sts: int
    ldg: int
    stg: int
    copies: int                 # cp.async + bulk copies
    barriers: int               # block barriers, cp.async and mbarrier waits
    static: float               # instructions in the loop's machine code, each once
    issue: float                # instructions a warp issues per pass on average
    wavefronts: int             # shared-memory wavefronts of warp 0's loads in one pass
    producer: float = 0.0       # slots the elected producer's warp issues per pass (its share in issue)
    step: float = 0.0           # slots of the K step around a kept main loop, per pass (in issue)
    per_step: int = 1           # passes in one step of the kept K loop around it (1: it is the K loop)

    @property
    def slots_per_ffma(self) -> float:
        """Issue slots per FFMA: 1.0 for a loop of nothing but FFMA."""
        return self.issue / self.ffma if self.ffma else float("inf")

    @property
    def slots_per_k_step(self) -> float:
        """Issue slots a warp spends on one K step on average, what the SASS view's split of
        the K loop counts (analysis/sass_issue.py: every warp's, plus the producer's / warps)."""
        return self.issue * self.per_step

    @property
    def producer_per_k_step(self) -> float:
        """Slots the elected producer's warp issues on one K step, unweighted."""
        return self.producer * self.per_step

    @property
    def static_per_ffma(self) -> float:
        """What the SASS view's FFMA share predicts (its inverse)."""
        return self.static / self.ffma if self.ffma else float("inf")


def _float_work(body) -> bool:
    for s in walk_kinds(body, (K.Declare, K.Assign)):
        value = s.init if isinstance(s, K.Declare) else s.value
        if value is not None and any(isinstance(x, K.Call) and x.fn in FLOAT_CALLS for x in sub_expressions(value)):
            return True
    return False


def _stages_only(body) -> bool:
    """A copy into shared memory whose float work is a staged prologue (silu(g) * u while
    staging): it stores to shared memory and accumulates nothing."""
    stores = any(isinstance(s, K.SharedStore) or isinstance(s, K.VectorStore) and s.space == "shared"
                 for s in walk_kinds(body, (K.SharedStore, K.VectorStore)))
    return stores and not any(True for _ in walk_kinds(body, (K.Assign,)))


def find_main_loop(func: K.KernelFunc) -> tuple[K.For, list[K.For]] | None:
    """(the main loop, the kept loops around it), or None for a kernel without one: the
    deepest kept loop with float work, a loop that accumulates before a staging copy nested in
    it (the copy is part of the K step the loop around it counts)."""
    best = None

    def visit(body, around, depth):
        nonlocal best
        for s in body:
            if isinstance(s, K.For):
                kept = not unrolled(s)
                key = (not _stages_only(s.body), depth + 1)
                if kept and _float_work(s.body) and (best is None or key > best[2]):
                    best = (s, list(around), key)
                visit(s.body, around + [s] if kept else around, depth + kept)
            elif isinstance(s, K.If):
                visit(s.then, around, depth)
                visit(s.orelse, around, depth)
    visit(func.body, [], 0)
    return (best[0], best[1]) if best else None


class _Iteration:
    """One walk over the main loop's body: counts (static and issue-weighted) and the shared
    loads with the unrolled loops around each, to cut into vector widths afterwards."""

    def __init__(self, func: K.KernelFunc, env0: list):
        self.threads = func.block[0] * func.block[1] * func.block[2]
        self.warps = -(-self.threads // 32)
        self.env0 = [(n, compile_int(e)) for n, e in env0]   # the ints declared before the loop
        self.static: dict[str, float] = {}
        self.issue: dict[str, float] = {}
        self.loads: list = []             # (array, offset, unrolled loops, local ints)
        self.locals: list = []
        self.products: set[str] = set()
        self.compiled: dict[int, tuple] = {}   # load index -> its offset and local ints, compiled
        self.elected = 0.0                # the warp share of the elected branch being walked, 0 outside
        self.producer = 0.0               # slots the elected producer's warp issues, unweighted

    def add(self, key: str, n: float, mult: float, share: float) -> None:
        self.static[key] = self.static.get(key, 0.0) + n * mult
        self.issue[key] = self.issue.get(key, 0.0) + n * mult * share
        if self.elected:
            self.producer += n * mult * share / self.elected

    def warp_share(self, cond) -> float:
        """Share of a block's warps with a lane for which `cond` holds (loop variables at 0)."""
        active, holds = set(), compile_int(cond)
        for t in range(self.threads):
            if t // 32 not in active and holds(self.env_for({"tid.x": t}, {})):
                active.add(t // 32)
        return len(active) / self.warps

    def env_for(self, specials: dict, loops: dict) -> dict:
        env = {"tid.x": 0, "tid.y": 0, "tid.z": 0, "bid.x": 0, "bid.y": 0, "bid.z": 0, **specials}
        env.update(loops)
        for name, fn in self.env0:
            env[name] = fn(env)
        return env

    def walk(self, body, ctx: list, mult: float, dyn: float, share: float) -> None:
        """ctx: [(var, values)] of the unrolled loops around; mult: their trips (static and
        issued); dyn: trips of kept inner loops (issued only); share: warps that run it."""
        for s in body:
            if isinstance(s, K.For):
                trip = trip_count(s) or 1
                start = const_int(s.start) or 0
                step = const_int(s.step) or 1
                if unrolled(s):
                    self.walk(s.body, ctx + [(s.var, range(start, start + trip * step, step))], mult * trip, dyn, share)
                else:
                    self.add("loop", OVERHEAD["loop"], mult, share * dyn * trip)
                    self.walk(s.body, ctx + [(s.var, (start,))], mult, dyn * trip, share)
            elif isinstance(s, K.If):
                inner = share * self.warp_share(s.cond)
                self.add("other", OVERHEAD["elect_guard" if s.elect else "branch"], mult, share * dyn)
                outside, self.elected = self.elected, (inner * dyn if s.elect else self.elected)
                if s.elect:
                    self.add("other", OVERHEAD["elect"], mult, inner * dyn)
                self.walk(s.then, ctx, mult, dyn, inner)
                self.elected = outside
                self.walk(s.orelse, ctx, mult, dyn, share)
            elif isinstance(s, (K.Declare, K.Assign)):
                value = s.init if isinstance(s, K.Declare) else s.value
                if isinstance(s, K.Declare) and s.ctype == "int" and value is not None:
                    self.locals.append((s.name, value))
                if value is not None:
                    self.expression(value, ctx, mult, dyn * share)
                    if isinstance(s, K.Declare) and isinstance(value, K.Call) and value.fn == "multiply":
                        self.products.add(s.name)
            else:
                self.statement(s, ctx, mult, dyn * share)

    def expression(self, value, ctx, mult: float, share: float) -> None:
        for x in sub_expressions(value):
            if isinstance(x, K.Call) and x.fn in FLOAT_CALLS:
                fused = x.fn == "add" and any(isinstance(a, K.Var) and a.name in self.products for a in x.args)
                if fused:
                    self.add("ffma", 1, mult, share)
                    self.add("float", -1, mult, share)       # the multiply it absorbs
                else:
                    self.add("float", SLOW_CALLS.get(x.fn, 1), mult, share)
            elif isinstance(x, K.SharedLoad):
                self.loads.append((x.array, x.offset, tuple(ctx), tuple(self.locals), share))
            elif isinstance(x, K.GlobalLoad):
                self.add("ldg", 1, mult, share)
                self.add("other", OVERHEAD["global"], mult, share)

    def statement(self, s, ctx, mult: float, share: float) -> None:
        if isinstance(s, K.VectorLoad) and s.space == "shared":
            # its 4 words join the distinct addresses (nvcc loads a repeated quad once)
            for j in range(4):
                offset = K.Binary("+", s.offset, K.Const(j, "int")) if j else s.offset
                self.loads.append((s.source, offset, tuple(ctx), tuple(self.locals), share))
        elif isinstance(s, K.VectorLoad):
            self.add("ldg", 1, mult, share)
        elif isinstance(s, K.VectorStore):
            self.add("sts" if s.space == "shared" else "stg", 1, mult, share)
        elif isinstance(s, K.SharedStore):
            self.expression(s.value, ctx, mult, share)
            self.add("sts", 1, mult, share)
        elif isinstance(s, K.GlobalStore):
            self.expression(s.value, ctx, mult, share)
            self.add("stg", 1, mult, share)
            self.add("other", OVERHEAD["global"], mult, share)
        elif type(s) in SYNC_AND_COPY:
            counter, overhead = SYNC_AND_COPY[type(s)]
            self.add(counter, 1, mult, share)
            self.add("other", OVERHEAD.get(overhead, 0), mult, share)
            if isinstance(s, MbarrierArrive) and s.expect_tx:
                self.add("other", OVERHEAD["expect_tx"], mult, share)

    def address(self, i: int, point: tuple, env: dict) -> int:
        """Shared offset of load `i` at `point` of its unrolled loops."""
        if i not in self.compiled:
            _, offset, ctx, local, _ = self.loads[i]
            self.compiled[i] = ([v for v, _ in ctx], [(n, compile_int(x)) for n, x in local], compile_int(offset))
        names, local, offset = self.compiled[i]
        e = {**env, **dict(zip(names, point))}
        for name, fn in local:
            e[name] = fn(e)
        return offset(e)

    def shared_widths(self, loop_vars: list[str]) -> tuple[tuple[int, int, int], tuple[float, float, float], int]:
        """((LDS, LDS.64, LDS.128) static, the same issue-weighted, wavefronts of warp 0).

        The distinct addresses each array is read at in one pass (nvcc loads an address
        once) are cut into aligned runs of 4, then 2; a run is one vector load only if, for
        every sampled thread, block and iteration, its loads sit at the same offsets from an
        aligned base: a register map that varies by thread (009's rotation) cannot be
        vectorised. A load's wavefronts: the most distinct words warp 0 asks of one bank, at
        least its distinct bytes over 128 (a broadcast costs one)."""
        if not self.loads:
            return (0, 0, 0), (0.0, 0.0, 0.0), 0
        tids = sorted({0, 1, 5, 17, self.threads // 2 + 3, self.threads - 1} & set(range(self.threads)))
        samples = []
        for tid, bid, it in itertools.product(tids, (0, 1), (0, 1)):
            env = self.env_for({"tid.x": tid, "bid.x": bid}, {v: it for v in loop_vars})
            addr: dict[str, dict] = {}
            for i, (array, _, ctx, _, _) in enumerate(self.loads):
                for point in itertools.product(*(vals for _, vals in ctx)):
                    addr.setdefault(array, {})[(i, point)] = self.address(i, point, env)
            samples.append(addr)
        shares: dict[str, float] = {}
        for array, _, _, _, share in self.loads:
            shares[array] = max(shares.get(array, 0.0), share)
        lanes = [self.env_for({"tid.x": t}, {v: 0 for v in loop_vars}) for t in range(min(32, self.threads))]
        static, issue, wavefronts = [0, 0, 0], [0.0, 0.0, 0.0], 0
        for array in samples[0]:
            for width, keys in vector_runs(array, samples):
                slot = {1: 0, 2: 1, 4: 2}[width]
                static[slot] += 1
                issue[slot] += shares[array]
                words = {w for env in lanes for (i, point) in keys for w in [self.address(i, point, env)]}
                per_bank: dict[int, int] = {}
                for w in words:
                    per_bank[w % 32] = per_bank.get(w % 32, 0) + 1
                wavefronts += max(max(per_bank.values()), -(-len(words) // 32))
        return tuple(static), tuple(issue), wavefronts


def _declared_ints(body, loop) -> list:
    """[(name, expr)] of the int Declares on the way to `loop`, in order."""
    out: list = []

    def visit(stmts) -> bool:
        for s in stmts:
            if s is loop:
                return True
            if isinstance(s, K.Declare) and s.ctype == "int" and s.init is not None:
                out.append((s.name, s.init))
            if isinstance(s, K.For) and visit(s.body):
                return True
            if isinstance(s, K.If) and (visit(s.then) or visit(s.orelse)):
                return True
        return False
    visit(body)
    return out


_ISSUED = ("ffma", "float", "sts", "ldg", "stg", "copies", "barriers", "other", "loop", "lds128")


def _in_k_step(loop: K.For, around: list) -> bool:
    """Whether `loop` sits directly in the body of the kept loop around it (an inner k loop)."""
    return bool(around) and any(s is loop for s in around[-1].body)


def k_step(func: K.KernelFunc, loop: K.For, around: list) -> tuple[float, float]:
    """(issue slots a warp spends on one step of the kept K loop around `loop` besides `loop`
    itself, the producer's share included; the producer's slots), (0, 0) when `loop` is not
    directly in the body of a kept loop (or holds the whole step)."""
    if not _in_k_step(loop, around):
        return 0.0, 0.0
    outer = around[-1]
    it = _Iteration(func, _declared_ints(func.body, outer))
    it.walk([s for s in outer.body if s is not loop], [(outer.var, (const_int(outer.start) or 0,))], 1.0, 1.0, 1.0)
    return OVERHEAD["loop"] + sum(it.issue.get(k, 0.0) for k in _ISSUED), it.producer


def count_iteration(func: K.KernelFunc, loop: K.For, around: list) -> MainLoop:
    it = _Iteration(func, _declared_ints(func.body, loop))
    factor = unroll_factor(loop)
    start, step = const_int(loop.start) or 0, const_int(loop.step) or 1
    it.walk(loop.body, [(loop.var, range(start, start + factor * step, step))], float(factor), 1.0, 1.0)
    (lds, lds64, lds128), widths_issue, wavefronts = it.shared_widths([lp.var for lp in around])
    st, iss = it.static, it.issue
    lds128 += int(st.get("lds128", 0))
    fixed = OVERHEAD["loop"]

    def total(counts, widths) -> float:
        return fixed + sum(counts.get(k, 0.0) for k in _ISSUED) + sum(widths)
    passes = -(-(trip_count(loop) or 1) // factor)
    per_step = passes if _in_k_step(loop, around) else 1
    step, step_producer = k_step(func, loop, around)
    for outer in around:
        passes *= trip_count(outer) or 1
    return MainLoop(
        func.name,
        loop.var,
        trip_count(loop) or 1,
        factor,
        passes,
        int(st.get("ffma", 0)),
        int(st.get("float", 0)),
        lds,
        lds64,
        lds128,
        int(st.get("sts", 0)),
        int(st.get("ldg", 0)),
        int(st.get("stg", 0)),
        int(st.get("copies", 0)),
        int(st.get("barriers", 0)),
        total(st, (lds, lds64, lds128)),
        total(iss, widths_issue) + step / per_step,
        wavefronts + int(st.get("lds128", 0)) * 4,
        it.producer + step_producer / per_step,
        step / per_step,
        per_step,
    )


def main_loop(func: K.KernelFunc) -> MainLoop | None:
    """The predicted main loop of one Kernel-IR kernel, or None (no loop with float work)."""
    found = find_main_loop(func)
    if found is None:
        return None
    loop, around = found
    return count_iteration(func, loop, around)


__all__ = ["MainLoop", "main_loop", "find_main_loop", "k_step", "unrolled", "unroll_factor", "evaluate", "OVERHEAD",
           "FULL_UNROLL", "PARTIAL_UNROLL"]
