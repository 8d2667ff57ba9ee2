"""The kernel signatures a CUDA translation unit declares, checked against a launch plan.

CuPy's `Function.__call__(grid, block, args)` passes each device array as a bare pointer and
cannot see the C parameter types: a buffer stored as int32 where the kernel reads
`long long*`, or arguments in another order than the parameters, is garbage or an illegal
address on the GPU, with no error on the host. So before anything is launched, the executor
reads the `extern "C" __global__` signatures from the very source NVRTC compiles and checks
that every launch passes as many buffers as its kernel has parameters, with the element
type each parameter points to. It needs no GPU: tests run it on every program of the corpus.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .launch_plan import LaunchPlan, LaunchPlanError

# The pointee types deplokit's renderer prints (passes/lower/cuda.py PARAM_CTYPES) and
# the device array dtype that holds each: CuPy passes an array's data pointer, whatever it is.
POINTEE_DTYPE = {"float": "float32", "long long": "int64", "int": "int32", "bool": "bool",
                 "__nv_bfloat16": "bfloat16", "__half": "float16"}

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(([^)]*)\)')
_PARAM = re.compile(r"^(?:const\s+)?(?P<type>[A-Za-z_][A-Za-z0-9_ ]*?)\s*\*\s*(?:__restrict__\s+)?(?P<name>\w+)$")
_TENSOR_MAP = re.compile(r"^const\s+__grid_constant__\s+(?P<type>\w+)\s+(?P<name>\w+)$")


@dataclass(frozen=True)
class KernelParam:
    name: str
    pointee: str        # the C type pointed to: float | long long | int | bool


def kernel_signatures(cuda_source: str) -> dict[str, tuple[KernelParam, ...]]:
    """Each `extern "C" __global__` kernel's pointer parameters, by kernel name."""
    return {name: params for name, (params, _) in _signatures(cuda_source).items()}


def kernel_tensor_maps(cuda_source: str) -> dict[str, tuple[str, ...]]:
    """Each kernel's tensor-map parameters (`const __grid_constant__ T name`, after its
    pointers), by kernel name."""
    return {name: maps for name, (_, maps) in _signatures(cuda_source).items()}


def _signatures(cuda_source: str):
    out = {}
    for m in _KERNEL.finditer(cuda_source):
        name, text = m.group(1), " ".join(m.group(2).split())
        params, maps = [], []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            tm = _TENSOR_MAP.match(part)
            if tm is not None:
                maps.append(tm.group("name"))
                continue
            pm = _PARAM.match(part)
            if pm is None or maps:
                raise LaunchPlanError(f"kernel {name}: parameter {part!r} is not a pointer to a buffer; "
                                      "deplokit kernels take buffer pointers, then tensor maps")
            params.append(KernelParam(pm.group("name"), pm.group("type").strip()))
        out[name] = (tuple(params), tuple(maps))
    return out


def check_plan_matches_source(plan: LaunchPlan, cuda_source: str) -> None:
    """Raise LaunchPlanError unless each launch of `plan` names a kernel of `cuda_source` and
    passes, parameter by parameter, a buffer whose device type is what the kernel points to."""
    sigs = kernel_signatures(cuda_source)
    maps = kernel_tensor_maps(cuda_source)
    for ln in plan.launches:
        params = sigs.get(ln.name)
        if params is None:
            raise LaunchPlanError(f"kernel {ln.name} is launched but the CUDA source declares no "
                                  f'extern "C" __global__ {ln.name}; declared: {", ".join(sorted(sigs)) or "none"}')
        if len(params) != len(ln.args):
            raise LaunchPlanError(f"kernel {ln.name} takes {len(params)} parameters; the launch passes "
                                  f"{len(ln.args)} ({', '.join(ln.args)})")
        for i, (p, arg) in enumerate(zip(params, ln.args)):
            want = POINTEE_DTYPE.get(p.pointee)
            if want is None:
                raise LaunchPlanError(f"kernel {ln.name}: parameter {p.name} points to {p.pointee}; supported: "
                                      f"{', '.join(POINTEE_DTYPE)}")
            got = plan.buffer(arg).device_dtype
            if p.name != (ln.params[i] if ln.params else arg) or got != want:
                raise LaunchPlanError(f"kernel {ln.name}: parameter {i} is {p.pointee}* {p.name} but the launch "
                                      f"passes buffer {arg} stored as {got}")
        want_maps = tuple(t.param for t in ln.tensor_maps)
        if maps[ln.name] != want_maps:
            raise LaunchPlanError(f"kernel {ln.name} takes tensor maps ({', '.join(maps[ln.name]) or 'none'}); "
                                  f"the launch passes ({', '.join(want_maps) or 'none'})")
