"""A warp-specialised split (Kernel IR `If(roles=True)`, ir/warp_roles.py): the producer
warpgroup (`then`) and the consumers (`orelse`) run concurrently on hardware, each waiting
on mbarriers the other arrives on, so neither branch can run to its end first.

The simulator runs each role as a Python thread, one at a time (deterministic): the
producer first, as far as its mbarrier waits let it, then the consumers until a wait of
theirs blocks; a role blocked in a wait resumes as soon as the other arrives on an
mbarrier. So the producer runs as early as hardware could run it: a slot released (or not
waited for) before its readers are done is refilled before they read it, and the result
is wrong or the read is caught before its data lands. A wait that blocks while the other
role has finished, or is itself blocked with nothing arrived since, never completes: the
usual MbarrierWait failure (a deadlock).
Each role keeps its own stack of scopes."""
from __future__ import annotations

import threading

from .values import NO_THREADS, as_bool, narrow

PRODUCER, CONSUMER = "producer", "consumer"


class Roles:
    def __init__(self, chunk):
        self.chunk = chunk
        self.cv = threading.Condition()
        self.turn = PRODUCER
        self.finished = {PRODUCER: False, CONSUMER: False}
        self.blocked_at = {PRODUCER: None, CONSUMER: None}    # chunk.tick when it yielded blocked
        self.scopes = {}
        self.error = None

    def other(self, me):
        return CONSUMER if me == PRODUCER else PRODUCER

    def _hand_over(self, me):
        """Give the turn to the other role and sleep until it comes back to `me`."""
        with self.cv:
            self.turn = self.other(me)
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn == me)
        self.chunk.scopes = self.scopes[me]

    def yield_blocked(self) -> bool:
        """The running role's wait cannot pass: let the other run. False when it cannot help
        (finished, or blocked itself with nothing arrived since): the wait never completes."""
        me = self.turn
        other = self.other(me)
        if self.finished[other] or self.blocked_at[other] == self.chunk.tick:
            return False
        self.blocked_at[me] = self.chunk.tick
        self._hand_over(me)
        self.blocked_at[me] = None
        return True

    def arrived(self) -> None:
        """The running role arrived on an mbarrier: a role blocked in a wait runs at once (as
        early as hardware could run it), so a slot released before its readers are done is
        refilled before they read it."""
        me = self.turn
        if self.blocked_at[self.other(me)] is not None and not self.finished[self.other(me)]:
            self._hand_over(me)

    def _producer(self, s, mask):
        with self.cv:
            self.cv.wait_for(lambda: self.turn == PRODUCER)
        self.chunk.scopes = self.scopes[PRODUCER]
        try:
            self.chunk.block(s.then, mask)
        except BaseException as e:       # noqa: BLE001 (re-raised by the consumer's thread)
            self.error = e
        with self.cv:
            self.finished[PRODUCER] = True
            self.turn = CONSUMER
            self.cv.notify_all()


def exec_roles(chunk, s, mask):
    c = as_bool(chunk.ev(s.cond, mask))
    mp, mc = narrow(mask, c), narrow(mask, ~c)
    if mp is NO_THREADS or mc is NO_THREADS or getattr(chunk, "roles", None) is not None:
        chunk.fail("a warp-specialised split needs producer and consumer threads, and is not nested")
    roles = Roles(chunk)
    outer = chunk.scopes
    roles.scopes = {PRODUCER: list(outer), CONSUMER: list(outer)}
    chunk.roles = roles
    worker = threading.Thread(target=roles._producer, args=(s, mp), daemon=True)
    worker.start()
    try:
        with roles.cv:                    # the producer runs first
            roles.cv.wait_for(lambda: roles.turn == CONSUMER)
        chunk.scopes = roles.scopes[CONSUMER]
        if roles.error is None:
            try:
                chunk.block(s.orelse, mc)
            except BaseException:
                if roles.error is None:      # else the producer's failure came first: report it
                    raise
            roles.finished[CONSUMER] = True
            while not roles.finished[PRODUCER] and roles.error is None:
                roles._hand_over(CONSUMER)
    finally:
        roles.finished[CONSUMER] = True
        if not roles.finished[PRODUCER]:       # it is blocked: let it see that no one is left
            with roles.cv:
                roles.turn = PRODUCER
                roles.cv.notify_all()
                roles.cv.wait_for(lambda: roles.finished[PRODUCER])
        worker.join()
        chunk.roles = None
        chunk.scopes = outer
    if roles.error is not None:
        raise roles.error
