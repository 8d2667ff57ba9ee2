"""NVRTC in a worker process, so that a crash of NVIDIA's compiler is one failed case.

NVRTC runs inside the process that calls it, and its front end can crash outright: CUDA 13.0's
segfaults on some kernels for sm_100/sm_120 that it compiles for sm_90 (docs/FUZZING.md has one).
In-process, that ends a whole campaign. The fuzzer compiles through one long-lived worker
instead: a worker that dies fails the case it was compiling ("NVRTC crashed"), and the next
case starts a fresh one. A rejected source comes back as the NvrtcError NVRTC raised.
"""
from __future__ import annotations

import atexit
import multiprocessing
import signal

from .. import errors
from ..errors import DeplokitError, NvrtcCrash
from ..runtime.nvrtc import compile_nvrtc


def serve(conn) -> None:
    """The worker's loop: compile each (source, arch) received, answer None or the error."""
    while True:
        request = conn.recv()
        if request is None:
            return
        source, arch = request
        try:
            compile_nvrtc(source, arch)
            conn.send(None)
        except DeplokitError as e:
            conn.send((type(e).__name__, str(e)))


class IsolatedNvrtc:
    """compile(source, arch) as runtime.nvrtc.compile_nvrtc, run in a worker process."""

    def __init__(self):
        self.process = None
        self.conn = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")    # no fork of a process with torch's threads
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
        self.process = self.conn = None

    def compile(self, source: str, arch: str) -> None:
        if self.process is None or not self.process.is_alive():
            self.stop()
            self.start()
        try:
            self.conn.send((source, arch))
            answer = self.conn.recv()
        except EOFError:
            self.process.join()
            code = self.process.exitcode
            self.stop()
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit {code}"
            raise NvrtcCrash(f"NVRTC crashed ({how}) compiling for {arch}") from None
        except BaseException:
            self.stop()        # interrupted (a case's time limit): the worker may be mid-compile
            raise
        if answer is not None:
            name, message = answer
            raise getattr(errors, name, DeplokitError)(message)


WORKER = IsolatedNvrtc()
atexit.register(WORKER.stop)
