"""A watchdog around a worker process: a job that hangs or kills its process (an illegal
address on the GPU, a segfault, a kernel that never returns) costs that job, not the caller.

    with Watchdog("deplokit.bench.runner:run_entry", timeout_s=300) as dog:
        outcome = dog.call("rmsnorm.tinyllama.s128")   # Outcome(status, value, error, seconds)

The worker is a separate Python process (started with `spawn`, as CUDA requires) that
imports the target function once and runs jobs one after another, so a CUDA context and
torch.compile's caches are shared by consecutive jobs. The parent waits at most `timeout_s`
for each answer. On a timeout it kills the worker (its GPU context goes with it); on a crash
it reads the exit code; either way, and after an error that leaves a CUDA context unusable
(`sticky`), the next call starts a fresh worker. An ordinary exception in a job is reported
and the worker carries on.
"""
from __future__ import annotations

import importlib
import multiprocessing
import signal
import time
import traceback
from dataclasses import dataclass

# Errors after which a CUDA context is unusable for the rest of the process.
STICKY_CUDA_ERRORS = ("illegal memory access", "illegal address", "illegal instruction", "misaligned address",
                      "unspecified launch failure", "launch timed out", "hardware stack error",
                      "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorLaunchFailure",
                      "CUDA_ERROR_LAUNCH_FAILED", "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS",
                      "device-side assert")


def is_sticky_cuda_error(text: str) -> bool:
    low = text.lower()
    return any(s.lower() in low for s in STICKY_CUDA_ERRORS)


@dataclass(frozen=True)
class Outcome:
    status: str                 # ok | error | crash | timeout
    value: object = None
    error: str = ""             # one line: the exception, the signal, or the time limit
    seconds: float = 0.0
    detail: str = ""            # the worker's traceback, for an error

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _resolve(target: str):
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"worker target must be 'module:function', got {target!r}")
    return getattr(importlib.import_module(module), name)


def _worker_main(conn, target: str) -> None:
    try:
        fn = _resolve(target)
    except BaseException as e:
        conn.send(("start_error", f"{type(e).__name__}: {' '.join(str(e).split())}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        args, kwargs = job
        try:
            conn.send(("ok", fn(*args, **kwargs), "", ""))
        except BaseException as e:      # a job's failure is reported, never fatal to the loop
            text = f"{type(e).__name__}: {' '.join(str(e).split())}"
            conn.send(("error", None, text, traceback.format_exc()))


def _describe_exit(code) -> str:
    if code is None:
        return "worker died"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code}"


class Watchdog:
    def __init__(self, target: str, timeout_s: float = 300.0, start_method: str = "spawn",
                 start_timeout_s: float = 300.0):
        self.target = target
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s   # importing torch and the target, not a job's time
        self._ctx = multiprocessing.get_context(start_method)
        self._proc = None
        self._conn = None
        self.restarts = 0           # workers replaced after a timeout, crash or sticky error

    def _start(self) -> str:
        """Start a worker and wait until it has imported its target; '' or why it failed."""
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker_main, args=(child, self.target), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        try:
            if not parent.poll(self.start_timeout_s):
                why = f"worker did not start within {self.start_timeout_s:g} s"
            else:
                kind, text = parent.recv()
                why = "" if kind == "ready" else f"worker could not load {self.target}: {text}"
        except (EOFError, OSError):
            self._proc.join(5)
            why = "worker failed to start: " + _describe_exit(self._proc.exitcode)
        if why:
            self._kill()
        return why

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def call(self, *args, timeout_s: float | None = None, **kwargs) -> Outcome:
        """Run target(*args, **kwargs) in the worker; never raises for the job's failures."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self.restarts += 1
            self._kill()
            why = self._start()
            if why:
                return Outcome("crash", error=why)
        t0 = time.monotonic()
        try:
            self._conn.send((args, kwargs))
            ready = self._conn.poll(limit)
            if not ready:
                self._kill()
                self.restarts += 1
                return Outcome("timeout", error=f"no answer within {limit:g} s; worker killed",
                               seconds=time.monotonic() - t0)
            status, value, error, detail = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            self.restarts += 1
            return Outcome("crash", error=_describe_exit(code), seconds=time.monotonic() - t0)
        seconds = time.monotonic() - t0
        if status == "error" and is_sticky_cuda_error(error):
            self._kill()            # the CUDA context is poisoned: the next job gets a new worker
            self.restarts += 1
        return Outcome(status, value, error, seconds, detail)

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self._kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
