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


def suite_job(name, target="sm_90", **kw):
    """A stand-in for deplokit.bench.runner.compile_entry: hangs on softmax entries, kills
    its process on rope entries, raises on add entries."""
    if ".softmax." in f".{name}":
        time.sleep(3600)
    if name.startswith("rope."):
        os._exit(7)
    if name.startswith("add."):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return {"name": name, "op": name.split(".")[0], "status": "ok", "kernels": 1, "compile_s": 0.0, "nvrtc_s": 0.0}
