"""`deplokit preflight`: a one-minute check that this machine can run the CuPy backend
(runtime/preflight.py), ending with one deplokit program (RMSNorm, on TMA stages where the
device has them) compiled, run on the device and matched against torch eager."""
from __future__ import annotations

import torch

from ..compilation import compile as dk_compile
from ..runtime.cupy_backend import device_arch
from ..runtime.preflight import preflight


def cmd_preflight(args) -> int:
    return preflight(check_program)


def check_program() -> str:
    cc = device_arch()[1]
    target = "sm_120" if cc >= 120 else "sm_90" if cc >= 90 else "sm_80"
    torch.manual_seed(0)
    c = dk_compile(torch.nn.RMSNorm(2048), torch.randn(1, 32, 2048), target=target)
    result = c.check(backend="cupy")
    if not result.ok:
        raise AssertionError(str(result))
    return f"RMSNorm ({target}) on the device: {result}"
