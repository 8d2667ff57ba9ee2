"""015's producer/consumer schedule (ir/warp_roles.py: the ring's AsyncWait.roles) spelled in
Kernel IR, after 002 stage_copies has written the mbarrier ring the usual way (an elected
computing thread issues tile ko + N - 1 at the head of iteration ko):

    mbarrier.init full[N] count 1; mbarrier.init empty[N] count C (the consumers); barrier
    if tid.x >= C:  # producer warpgroup (threads C .. C + 127)
        if tid.x == C (elected in warp C / 32): tiles 0 .. N - 2 into slots 0 .. N - 2
        for ko: if ko + N - 1 < n: elected: wait empty[slot]; expect_tx full[slot]; copies
    else:  # consumers (the kernel's C threads, unchanged)
        for ko: wait full[ko % N]; wgmma ...; commit; wait_group F;
                F == 0: arrive empty[ko % N]   F == 1: if ko >= 1: arrive empty[(ko - 1) % N]
        wait_group 0 (F > 0); the epilogue

Registers (register_split, decided by 015 and recorded on WarpRoles): the producer branch
starts with setmaxnreg.dec P, the consumers' with setmaxnreg.inc C, and the kernel is
bound __launch_bounds__(threads, 1) so ptxas knows the count at entry (else it drops them).

The statements are 002's, moved: the producer issues exactly the copies the elected thread
did, so the slots, phases and byte counts are unchanged; the empty barriers count the
consumers only. With F groups in flight the wgmma of tile ko may still read slot ko % N
after the iteration ends, so its release waits until wait_group F has retired it."""
from __future__ import annotations

import dataclasses

from ...errors import DeplokitError
from ...ir import kernel_ir as K
from ...ir.kernel_ir import StageWait
from ...ir.kernel_tma import MbarrierArrive, MbarrierInit, TmaTensorLoad
from ...ir.kernel_wgmma import SetMaxNReg, WgmmaWait
from ...ir.warp_roles import PRODUCER_THREADS, SETMAXNREG_MAX, SETMAXNREG_STEP, entry_registers

PRODUCER_REGS = 40          # a copy issuer's loop counters, slots and tensor-map addresses
                            # (CUTLASS's warp-specialised kernels keep 40 too)


def register_split(consumers: int, producer_threads: int = PRODUCER_THREADS) -> tuple[int, int]:
    """(producer, consumer) registers a thread after setmaxnreg, for `consumers` computing
    threads beside a producer warpgroup in a block bound to one resident block: the producer
    keeps PRODUCER_REGS, the consumers share the rest of the launch's T x entry registers, in
    multiples of 8 up to 256 (2 consumer warpgroups: 384 x 168 = 64512 -> 40 and 232)."""
    threads = consumers + producer_threads
    pool = threads * entry_registers(threads)
    rest = (pool - producer_threads * PRODUCER_REGS) // consumers
    return PRODUCER_REGS, min(SETMAXNREG_MAX, rest // SETMAXNREG_STEP * SETMAXNREG_STEP)


def roles_of(func: K.KernelFunc):
    """The WarpRoles 015 stamped on the kernel's ring (before 002 replaces its StageWait), or None."""
    return next((s.wait.roles for s in K.walk_stmts(func.body)
                 if isinstance(s, StageWait) and getattr(s.wait, "roles", None)), None)


def _issues(s) -> bool:
    return any(isinstance(x, TmaTensorLoad) for x in K.walk_stmts((s,)))


def _elect_in(stmts, tid: int) -> tuple:
    """The statements with each elected If (tid.x == 0) electing thread `tid` instead."""
    out = []
    for s in stmts:
        if isinstance(s, K.If):
            cond = K.Binary("==", K.Special("tid.x"), K.Const(tid, "int")) if s.elect else s.cond
            s = dataclasses.replace(s, cond=cond, then=_elect_in(s.then, tid), orelse=_elect_in(s.orelse, tid))
        elif isinstance(s, K.For):
            s = dataclasses.replace(s, body=_elect_in(s.body, tid))
        out.append(s)
    return tuple(out)


def split_roles(func: K.KernelFunc, roles) -> K.KernelFunc:
    """`func` (after 002) with its mbarrier ring's copies issued by a producer warpgroup."""
    if roles is None:
        return func
    name = func.name
    body = list(func.body)
    empties = [s for s in body if isinstance(s, MbarrierInit) and s.name.endswith("_empty")]
    if len(empties) != 1 or func.block[1:] != (1, 1):
        raise DeplokitError(f"{name}: warp_specialize needs one mbarrier ring at the top of a 1-D block")
    var = empties[0].name[:-len("_empty")]
    at = next((i for i, s in enumerate(body) if isinstance(s, K.For) and s.var == var), None)
    if at is None:
        raise DeplokitError(f"{name}: warp_specialize: the ring's loop {var} is not at the top of the kernel")
    bar = max(i for i, s in enumerate(body[:at]) if isinstance(s, K.Barrier))
    consumers = func.block[0]
    loop = body[at]
    # 002 comments each issue ("prologue: ...", "steady state: ..."): they travel with it
    pro = [s for s in body[bar + 1:at] if _issues(s) or (isinstance(s, K.Comment) and s.text.startswith("prologue"))]
    steady = [s for s in loop.body if _issues(s) or (isinstance(s, K.Comment) and s.text.startswith("steady"))]
    consume = [s for s in loop.body if not any(s is x for x in steady)]
    after = []
    if roles.in_flight:
        consume = _in_flight(name, consume, loop, roles.in_flight)
        after = [WgmmaWait(0)]
    producer = _elect_in(tuple(pro) + (dataclasses.replace(loop, body=tuple(steady)),), consumers)
    consumer = [s for s in body[bar + 1:at] if not any(s is x for x in pro)]
    consumer += [dataclasses.replace(loop, body=tuple(consume))] + after + body[at + 1:]
    if any(isinstance(s, K.Barrier) for s in K.walk_stmts(tuple(consumer))):
        raise DeplokitError(f"{name}: warp_specialize: the consumers have a block barrier, which the producer "
                            f"warpgroup never reaches")
    head = [dataclasses.replace(s, count=consumers) if s is empties[0] else s for s in body[:bar + 1]]
    min_blocks = func.min_blocks
    if roles.producer_regs:      # the register split 015 decided: one resident block fixes the entry count
        producer = (SetMaxNReg(roles.producer_regs, inc=False),) + producer
        consumer = [SetMaxNReg(roles.consumer_regs, inc=True)] + consumer
        min_blocks = 1
    split = K.If(K.Binary(">=", K.Special("tid.x"), K.Const(consumers, "int")),
                 producer, tuple(consumer), roles=True)
    threads = consumers + roles.producer_threads
    return dataclasses.replace(func, body=tuple(head) + (split,), block=(threads, 1, 1), min_blocks=min_blocks)


def _in_flight(name, stmts, loop, n: int) -> list:
    """The consumer's iteration with `n` wgmma groups left running: wait_group n, and the
    release of the slot read n tiles ago (every thread arrives on it once its wgmma retired)."""
    waits = [i for i, s in enumerate(stmts) if isinstance(s, WgmmaWait)]
    arrives = [i for i, s in enumerate(stmts) if isinstance(s, MbarrierArrive) and s.name == f"{loop.var}_empty"]
    if len(waits) != 1 or len(arrives) != 1 or arrives[0] != len(stmts) - 1:
        raise DeplokitError(f"{name}: wgmma_in_flight: the K loop is not one wgmma group and a slot release")
    arrive = stmts[arrives[0]]
    slots = arrive.slot.b                   # (ko - start) % slots
    zero = isinstance(loop.start, K.Const) and int(loop.start.value) == 0
    j = K.Var(loop.var) if zero else K.Binary("-", K.Var(loop.var), loop.start)
    earlier = K.Binary("%", K.Binary("-", j, K.Const(n, "int")), slots)
    out = list(stmts)
    out[waits[0]] = WgmmaWait(n)
    out[-1] = K.If(K.Binary(">=", j, K.Const(n, "int")),
                   (K.Comment(f"the wgmma of tile {loop.var} - {n} retired: release its slot to the producer"),
                    dataclasses.replace(arrive, slot=earlier)))
    # 002's comment before the release speaks of slot ko % N: drop it
    if len(out) >= 2 and isinstance(out[-2], K.Comment):
        del out[-2]
    return out
