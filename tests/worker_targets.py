"""Jobs for the watchdog tests (tests/test_worker.py), run in a spawned worker process."""
import os
import signal
import time


def job(kind, value=None):
    if kind == "echo":
        return {"pid": os.getpid(), "value": value}
    if kind == "hang":
        time.sleep(3600)
    if kind == "exit":
        os._exit(3)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
    if kind == "raise":
        raise ValueError(f"bad job {value}")
    if kind == "sticky":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    raise AssertionError(kind)
