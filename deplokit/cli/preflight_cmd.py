"""`deplokit preflight`: a one-minute check that this machine can run the CuPy backend
(runtime/preflight.py), ending with one deplokit program (RMSNorm, on TMA stages where the
device has them) compiled, run on the device and matched against torch eager."""
from __future__ import annotations

import torch

from ..compilation import compile as dk_compile
from ..runtime.cupy_backend import device_arch
from ..runtime.preflight import preflight
from .parser import add_command


def add_parser(sub) -> None:
    add_command(sub, "preflight", lambda args: preflight(check_program),
                help="check that this machine can run the CUDA kernels",
                description="Print the torch / CUDA / CuPy / driver / NVRTC versions and the device, then check in "
                            "order, stopping at the first failure: NVRTC builds a cubin for the device, the driver "
                            "loads and runs it, DLPack shares memory between torch and CuPy, and one program matches "
                            "torch eager on the device. Exit status 0 when every check passed, 1 on a failure, 2 "
                            "without a CUDA device.")


def check_program() -> str:
    cc = device_arch()[1]
    target = "sm_120" if cc >= 120 else "sm_90" if cc >= 90 else "sm_80"
    torch.manual_seed(0)
    c = dk_compile(torch.nn.RMSNorm(2048), torch.randn(1, 32, 2048), target=target)
    result = c.check(backend="cupy")
    if not result.ok:
        raise AssertionError(str(result))
    return f"RMSNorm ({target}) on the device: {result}"
