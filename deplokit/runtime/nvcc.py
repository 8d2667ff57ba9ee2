"""Compile CUDA text with nvcc into a cubin and read what ptxas says about each kernel.

    compile_cuda(source, arch="sm_90") -> CompileResult(.cubin, .stats, .log)

runs, in a temporary directory that is removed afterwards,

    nvcc -cubin -arch=sm_XX -O3 -Xptxas -v -o kernel.cubin kernel.cu

and parses ptxas's `-v` report into one KernelStats per kernel: registers per thread,
static shared memory, spill stores/loads and the stack frame (bytes of local memory, where
a register array that could not stay in registers goes). No GPU is needed, only the
toolkit. A failure raises NvccError quoting nvcc's first error and the offending source line.

Results are cached per process by (sha256 of the source, arch): the same text is compiled
once. The targets are plain `sm_80`, `sm_90` and `sm_120`: the inline PTX deplokit emits
(cp.async, cp.async.bulk, mbarrier.try_wait) needs no architecture-specific `sm_90a`;
`sm_90a` / `sm_120a` are accepted too, should a kernel ever need wgmma or setmaxnreg.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

from ..errors import NvccError

__all__ = ["NvccError", "KernelStats", "CompileResult", "compile_cuda", "nvcc_available",
           "nvcc_path", "ptx_arches", "parse_ptxas_log", "annotate_kernel", "annotate_program",
           "clear_cache", "NVCC_FLAGS", "DEFAULT_TIMEOUT_S"]

# Flags besides -arch and the file names; the cache key assumes they never change.
NVCC_FLAGS = ("-cubin", "-O3", "-Xptxas", "-v")
DEFAULT_TIMEOUT_S = 120.0
_ARCH = re.compile(r"^sm_(\d+)(a?)$")


@dataclass(frozen=True)
class KernelStats:
    registers: int                 # per thread
    smem_bytes: int                # static shared memory per block
    spill_stores: int              # bytes
    spill_loads: int               # bytes
    stack_bytes: int = 0           # stack frame (local memory) per thread

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    stats: dict[str, KernelStats]
    log: str
    arch: str
    command: tuple[str, ...] = field(default=())


def ptx_arches() -> tuple[str, ...]:
    """The architectures deplokit targets (deplokit.target.TARGETS), as nvcc spells them."""
    return ("sm_80", "sm_90", "sm_120")


def nvcc_path() -> str | None:
    """$DEPLOKIT_NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc; None if none exists."""
    env = os.environ.get("DEPLOKIT_NVCC")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.path.isfile(default) and os.access(default, os.X_OK) else None


def nvcc_available() -> bool:
    return nvcc_path() is not None


def _normalize_arch(arch) -> str:
    name = getattr(arch, "name", arch)              # a deplokit Target
    if isinstance(name, int) and not isinstance(name, bool):
        name = f"sm_{name}"
    if not isinstance(name, str) or not _ARCH.match(name):
        raise NvccError(f"unknown architecture {arch!r}; expected sm_XX such as "
                        f"{', '.join(ptx_arches())}")
    return name


# -- ptxas -v ---------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict[str, KernelStats]:
    """Per-kernel stats from ptxas -v output (entry functions only, in report order)."""
    stats: dict[str, KernelStats] = {}
    entry = props = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            entry, props = m.group(1), None
            stats[entry] = KernelStats(0, 0, 0, 0)
            continue
        m = _PROPS.search(line)
        if m:
            props = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and entry is not None and props == entry:
            stats[entry] = dataclasses.replace(stats[entry], stack_bytes=int(m.group(1)),
                                               spill_stores=int(m.group(2)),
                                               spill_loads=int(m.group(3)))
            continue
        m = _USED.search(line)
        if m and entry is not None:
            smem = _SMEM.search(line)
            stats[entry] = dataclasses.replace(stats[entry], registers=int(m.group(1)),
                                               smem_bytes=int(smem.group(1)) if smem else 0)
    return stats


# -- errors -----------------------------------------------------------------------------------

_FRONTEND_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error: ?(?P<msg>.*)$")
_PTXAS_ERROR = re.compile(r"^ptxas\s+(?P<file>\S+?), line (?P<line>\d+); (?:fatal\s*|error\s*): ?(?P<msg>.*)$")


def _quote(text: str, line: int) -> str | None:
    lines = text.splitlines()
    if 1 <= line <= len(lines):
        return f"{line:5d} | {lines[line - 1].rstrip().expandtabs(4)}"
    return None


def _failure(source: str, arch: str, log: str, ptx: str | None) -> NvccError:
    lines = log.splitlines()
    for raw in lines:
        m = _FRONTEND_ERROR.match(raw.strip())
        if m:
            n = int(m.group("line"))
            quoted = _quote(source, n)
            nerr = sum(1 for x in lines if _FRONTEND_ERROR.match(x.strip()))
            more = f" (and {nerr - 1} more)" if nerr > 1 else ""
            msg = f"nvcc ({arch}) failed: kernel.cu line {n}: error: {m.group('msg')}{more}"
            if quoted:
                msg += f"\n{quoted}"
            return NvccError(msg, log, n, quoted)
    for raw in lines:
        m = _PTXAS_ERROR.match(raw.strip())
        if m:
            n = int(m.group("line"))
            quoted = _quote(ptx, n) if ptx else None
            msg = f"ptxas ({arch}) failed: PTX line {n}: error: {m.group('msg').strip()}"
            if quoted:
                msg += f"\n{quoted}"
            return NvccError(msg, log, n, quoted)
    first = next((x.strip() for x in lines if "error" in x.lower()), lines[0].strip() if lines else "")
    return NvccError(f"nvcc ({arch}) failed: error: {first or 'no output'}", log)


# -- compile ----------------------------------------------------------------------------------

_CACHE: dict[tuple[str, str], CompileResult] = {}
_LOCK = threading.Lock()


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()


def _run(cmd: list[str], cwd: str, timeout: float, arch: str) -> subprocess.CompletedProcess:
    """Run nvcc in its own process group, so a timeout also ends cicc/ptxas under it."""
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as e:
        raise NvccError(f"could not run nvcc ({cmd[0]}): {e}") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        out, _ = proc.communicate()
        raise NvccError(f"nvcc ({arch}) timed out after {timeout:g} s; command: {' '.join(cmd)}",
                        out or "") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def compile_cuda(source: str, arch: str = "sm_90", kernel_names=None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> CompileResult:
    """Compile `source` for `arch` into a cubin; stats of every kernel ptxas reports.

    kernel_names: kernels that must be in the result (NvccError if ptxas reports none of
    that name, e.g. a kernel that is not `extern "C"` and so was name-mangled)."""
    arch = _normalize_arch(arch)
    key = (hashlib.sha256(source.encode()).hexdigest(), arch)
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is None:
        cached = _compile(source, arch, timeout)
        with _LOCK:
            cached = _CACHE.setdefault(key, cached)
    if kernel_names:
        missing = [n for n in kernel_names if n not in cached.stats]
        if missing:
            raise NvccError(f"nvcc ({arch}): no kernel named {', '.join(missing)} in the cubin; "
                            f"kernels: {', '.join(cached.stats) or '(none)'}", cached.log)
    return cached


def _compile(source: str, arch: str, timeout: float) -> CompileResult:
    nvcc = nvcc_path()
    if nvcc is None:
        raise NvccError("nvcc not found: install the CUDA toolkit, put nvcc on PATH, or set DEPLOKIT_NVCC")
    with tempfile.TemporaryDirectory(prefix="deplokit_nvcc_") as tmp:
        with open(os.path.join(tmp, "kernel.cu"), "w") as f:
            f.write(source)
        cmd = [nvcc, NVCC_FLAGS[0], f"-arch={arch}", *NVCC_FLAGS[1:], "-o", "kernel.cubin", "kernel.cu"]
        proc = _run(cmd, tmp, timeout, arch)
        log = proc.stdout
        if proc.returncode != 0:
            ptx = None
            if "ptxas" in log:
                # ptxas names a line of the PTX: make the PTX to quote it.
                ptx_cmd = [nvcc, "-ptx", f"-arch={arch}", "-O3", "-o", "kernel.ptx", "kernel.cu"]
                try:
                    if _run(ptx_cmd, tmp, timeout, arch).returncode == 0:
                        with open(os.path.join(tmp, "kernel.ptx")) as f:
                            ptx = f.read()
                except NvccError:
                    ptx = None
            raise _failure(source, arch, log, ptx)
        with open(os.path.join(tmp, "kernel.cubin"), "rb") as f:
            cubin = f.read()
    display = tuple(["nvcc", *cmd[1:]])
    return CompileResult(cubin=cubin, stats=parse_ptxas_log(log), log=log, arch=arch, command=display)


# -- Kernel IR --------------------------------------------------------------------------------

def annotate_kernel(kernel, stats: KernelStats):
    """The KernelFunc with ptxas's registers, static smem and spill bytes filled in."""
    return dataclasses.replace(kernel, registers=stats.registers, smem_bytes=stats.smem_bytes,
                               spills=stats.spills)


def annotate_program(program, result: CompileResult):
    """A KernelProgram whose kernels carry the stats of `result` (from its rendered source)."""
    kernels = tuple(annotate_kernel(k, result.stats[k.name]) if k.name in result.stats else k
                    for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)
