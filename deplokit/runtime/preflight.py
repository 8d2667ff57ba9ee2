"""A one-minute check that a machine can run the CuPy backend, before spending device time
(`deplokit preflight`, cli/preflight_cmd.py, which adds the check that compiles a program):

It prints the versions that matter (torch and its CUDA, CuPy, the driver, NVRTC), the device,
then checks in order, stopping at the first failure: NVRTC compiles a kernel for the device's
architecture, the driver loads that cubin, a tensor crosses DLPack both ways, and then the
caller's checks (the CLI's: one deplokit program runs on the device and matches torch eager;
the runtime does not compile programs itself).
Exit status 0 when every check passed, 1 otherwise (2: no CUDA device at all).
"""
from __future__ import annotations

import platform

import numpy as np
import torch

from . import device
from .cupy_backend import compile_cubin, device_arch
from .nvrtc import nvrtc_available, nvrtc_version

PROBE = 'extern "C" __global__ void probe(float* x) { x[threadIdx.x] = 2.0f * threadIdx.x; }\n'


def _versions() -> list[str]:
    lines = [f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda})"]
    try:
        import cupy
        rt = cupy.cuda.runtime
        lines.append(f"cupy {cupy.__version__}, CUDA runtime {rt.runtimeGetVersion()}, driver {rt.driverGetVersion()}")
    except Exception as e:          # no cupy, or no driver: say so and carry on to the checks
        lines.append(f"cupy: {type(e).__name__}: {e}")
    lines.append(f"NVRTC {'.'.join(map(str, nvrtc_version()))}" if nvrtc_available() else "NVRTC: not found")
    return lines


def _device() -> str:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return (f"device: {name}, {device_arch()[0]}, {props['multiProcessorCount']} SMs, "
            f"L2 {props['l2CacheSize'] >> 20} MiB, {props['sharedMemPerBlockOptin'] >> 10} KiB smem/block opt-in")


def _check_cubin_loads() -> str:
    import cupy
    arch = device_arch()[0]
    module = cupy.cuda.function.Module()
    module.load(compile_cubin(PROBE, arch))
    x = cupy.zeros(32, dtype=cupy.float32)
    module.get_function("probe")((1, 1, 1), (32, 1, 1), (x,))
    got = cupy.asnumpy(x)
    if not (got == 2.0 * np.arange(32)).all():
        raise AssertionError(f"probe kernel wrote {got[:4]}...")
    return f"{arch} cubin built, loaded by the driver and run"


def _check_dlpack() -> str:
    import cupy
    t = torch.arange(8, dtype=torch.float32, device="cuda")
    c = cupy.from_dlpack(t)
    c *= 3
    back = torch.from_dlpack(c)
    torch.cuda.synchronize()
    if back.data_ptr() != t.data_ptr() or t[7].item() != 21.0:
        raise AssertionError("torch and cupy do not share the tensor's memory")
    return "torch <-> cupy DLPack shares memory both ways"


def preflight(*more_checks) -> int:
    """Print the versions, then run the device checks and `more_checks` (callables that
    return a line, or raise) in order, stopping at the first failure."""
    for line in _versions():
        print(line)
    if not device.gpu_available():
        print("FAIL: no CUDA device (cupy.cuda.runtime.getDeviceCount() found none or failed)")
        return 2
    checks = (_device, _check_cubin_loads, _check_dlpack, *more_checks)
    for check in checks:
        try:
            print(("" if check is _device else "ok: ") + check(), flush=True)
        except Exception as e:          # report and stop: later checks depend on earlier ones
            print(f"FAIL: {check.__name__.lstrip('_')}: {type(e).__name__}: {' '.join(str(e).split())[:400]}")
            return 1
    print("preflight passed")
    return 0
