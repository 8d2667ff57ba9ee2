"""Is there a CUDA device to run on? One answer for the CuPy backend, `backend="auto"`,
benchmarks and the tuner's `gpu` objective."""
from __future__ import annotations

import functools

from ..errors import DeviceUnavailableError


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device it can talk to."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:   # no cupy, no driver, no device: CuPy raises several types
        return False


def require_gpu(what: str) -> None:
    if not gpu_available():
        raise DeviceUnavailableError(f"{what} needs a CUDA device and none is available "
                                     "(cupy could not find one); run on the simulator with backend='sim'")
