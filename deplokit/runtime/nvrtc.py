"""Compile deplokit's CUDA translation unit with NVRTC (CUDA's runtime compiler) into a cubin.

    compile_nvrtc(source, arch="sm_90") -> NvrtcResult(.cubin, .log, .arch)

NVRTC needs no GPU and no toolkit, only libnvrtc (the `nvidia-cuda-nvrtc` wheel, reached
through CuPy's binding), and compiles a kernel in tens of milliseconds where nvcc takes a
few hundred. The CuPy backend loads the cubin it returns.

NVRTC has no math.h, so `INFINITY` and `NAN`, which the renderer prints for float
infinities, are defined by a short prelude from their bit patterns; a `#line` directive after
it keeps error line numbers those of the rendered source. Results are cached per process
by (sha256 of the source, arch).

A half program includes cuda_bf16.h / cuda_fp16.h, which NVRTC does not carry: they are read
from the CUDA toolkit's include directory (cuda-pathfinder, CUDA_HOME / CUDA_PATH, nvcc's
toolkit, /usr/local/cuda); without one such a program is a clear NvrtcError.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass

from ..errors import DeplokitError, NvrtcError

PRELUDE = ("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
           "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n"
           '#line 1 "kernel.cu"\n')
NVRTC_OPTIONS = ("-std=c++17",)
_ARCH = re.compile(r"^sm_\d+a?$")
_ERROR = re.compile(r"^kernel\.cu\((?P<line>\d+)\): (?:catastrophic )?error: ?(?P<msg>.*)$")


@dataclass(frozen=True)
class NvrtcResult:
    cubin: bytes
    log: str
    arch: str
    options: tuple[str, ...]


_TOOLKIT_HEADER = re.compile(r"^#include <(cuda_bf16\.h|cuda_fp16\.h)>", re.M)


def cuda_include_dir() -> str | None:
    """The CUDA toolkit's include directory holding cuda_bf16.h, or None."""
    candidates = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        candidates.append(find_nvidia_header_directory("cudart"))
    except Exception:       # no cuda-pathfinder, or no toolkit it knows of
        pass
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None, "/usr/local/cuda"]
    candidates += [os.path.join(r, "include") for r in roots if r]
    return next((d for d in candidates if d and os.path.isfile(os.path.join(d, "cuda_bf16.h"))), None)


def _header_options(source: str, arch: str) -> tuple[str, ...]:
    headers = _TOOLKIT_HEADER.findall(source)
    if not headers:
        return ()
    include = cuda_include_dir()
    if include is None:
        raise NvrtcError(f"NVRTC ({arch}): this program stores half tensors and includes {', '.join(headers)}, "
                         f"which come with the CUDA toolkit; none was found (set CUDA_HOME to the toolkit)")
    return (f"--include-path={include}",)


_CACHE: dict[tuple[str, str], NvrtcResult] = {}
_LOCK = threading.Lock()


def _binding():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        return nvrtc
    except Exception as e:          # no cupy, or no libnvrtc it can load
        raise NvrtcError(f"NVRTC is not available ({type(e).__name__}: {e}); install cupy and "
                         "nvidia-cuda-nvrtc (pip install 'deplokit[gpu]')") from None


def nvrtc_available() -> bool:
    try:
        _binding()
        return True
    except NvrtcError:
        return False


def nvrtc_version() -> tuple[int, int]:
    return tuple(_binding().getVersion())


def compile_nvrtc(source: str, arch: str = "sm_90") -> NvrtcResult:
    """Compile `source` (one translation unit, extern "C" kernels) for `arch` to a cubin."""
    arch = getattr(arch, "name", arch)
    if not isinstance(arch, str) or not _ARCH.match(arch):
        raise DeplokitError(f"unknown architecture {arch!r}; expected sm_XX such as sm_80, sm_90, sm_120")
    key = (hashlib.sha256(source.encode()).hexdigest(), arch)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    nvrtc = _binding()
    options = (f"--gpu-architecture={arch}",) + NVRTC_OPTIONS + _header_options(source, arch)
    prog = nvrtc.createProgram(PRELUDE + source, "kernel.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
            failed = False
        except nvrtc.NVRTCError:
            failed = True
        log = nvrtc.getProgramLog(prog) or ""
        if failed:
            raise _failure(source, arch, log)
        result = NvrtcResult(nvrtc.getCUBIN(prog), log, arch, options)
    finally:
        nvrtc.destroyProgram(prog)
    with _LOCK:
        return _CACHE.setdefault(key, result)


def _failure(source: str, arch: str, log: str) -> NvrtcError:
    lines = source.splitlines()
    errors = [m for m in (_ERROR.match(x.strip()) for x in log.splitlines()) if m]
    if not errors:
        first = next((x.strip() for x in log.splitlines() if x.strip()), "no output")
        return NvrtcError(f"NVRTC ({arch}) failed: {first}", log)
    m = errors[0]
    n = int(m.group("line"))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    quoted = f"{n:5d} | {lines[n - 1].rstrip()}" if 1 <= n <= len(lines) else None
    msg = f"NVRTC ({arch}) failed: kernel.cu line {n}: error: {m.group('msg')}{more}"
    return NvrtcError(msg + (f"\n{quoted}" if quoted else ""), log, n, quoted)
