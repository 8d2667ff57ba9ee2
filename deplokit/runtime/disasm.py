"""Disassemble a cubin into SASS text with the CUDA toolkit's cuobjdump (or nvdisasm).

    disassemble(cubin) -> Disassembly(text, tool)

The toolkit nvcc comes from may lack both tools; the pip wheels `nvidia-cuda-cuobjdump` and
`nvidia-cuda-nvdisasm` (the `sass` extra) carry them. They are looked up in this order:
$DEPLOKIT_CUOBJDUMP / $DEPLOKIT_NVDISASM, the files the installed wheel lists (read from its
metadata, so no install path is assumed), PATH, and the folder of nvcc. cuobjdump is preferred
(one `Function : NAME` section per kernel); nvdisasm is the fallback. Without either,
DisassemblerError says how to get one. No GPU is needed.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from ..errors import DisassemblerError
from .nvcc import nvcc_path

# tool -> (environment variable, pip distribution that ships it, arguments before the cubin)
TOOLS = {
    "cuobjdump": ("DEPLOKIT_CUOBJDUMP", "nvidia-cuda-cuobjdump", ("-sass",)),
    "nvdisasm": ("DEPLOKIT_NVDISASM", "nvidia-cuda-nvdisasm", ("-c",)),
}
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Disassembly:
    text: str
    tool: str               # cuobjdump | nvdisasm
    version: str            # the wheel's version, or "" for a toolkit binary


def _executable(path) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def _from_wheel(tool: str, dist: str) -> tuple[str, str] | None:
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in d.files or ():
        if f.name == tool:
            path = str(d.locate_file(f))
            if _executable(path):
                return path, d.version
    return None


def tool_path(tool: str) -> tuple[str, str] | None:
    """(path, wheel version or "") of `tool` (cuobjdump | nvdisasm), or None if absent."""
    env, dist, _ = TOOLS[tool]
    if os.environ.get(env):
        return (os.environ[env], "") if _executable(os.environ[env]) else None
    found = _from_wheel(tool, dist)
    if found:
        return found
    on_path = shutil.which(tool)
    if on_path:
        return on_path, ""
    nvcc = nvcc_path()
    beside = os.path.join(os.path.dirname(nvcc), tool) if nvcc else None
    return (beside, "") if _executable(beside) else None


def find_disassembler() -> tuple[str, str, str] | None:
    """(tool, path, version) of the first disassembler found, cuobjdump first."""
    for tool in TOOLS:
        found = tool_path(tool)
        if found:
            return tool, found[0], found[1]
    return None


def disassembler_available() -> bool:
    return find_disassembler() is not None


def disassemble(cubin: bytes) -> Disassembly:
    """The SASS of every kernel in `cubin`."""
    found = find_disassembler()
    if found is None:
        raise DisassemblerError("no SASS disassembler found: pip install nvidia-cuda-cuobjdump (or "
                                "nvidia-cuda-nvdisasm), the `sass` extra, or set DEPLOKIT_CUOBJDUMP")
    tool, path, version = found
    with tempfile.TemporaryDirectory(prefix="deplokit_sass_") as tmp:
        name = os.path.join(tmp, "kernel.cubin")
        with open(name, "wb") as f:
            f.write(cubin)
        try:
            proc = subprocess.run([path, *TOOLS[tool][2], name], capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DisassemblerError(f"could not run {tool} ({path}): {e}") from None
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        raise DisassemblerError(f"{tool} failed on the cubin: {first[0] if first else 'no output'}")
    return Disassembly(proc.stdout, tool, version)


__all__ = ["DisassemblerError", "Disassembly", "disassemble", "disassembler_available", "find_disassembler",
           "tool_path", "TOOLS"]
