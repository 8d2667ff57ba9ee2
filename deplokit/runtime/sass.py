"""CUDA source -> cubin (nvcc) -> SASS (cuobjdump / nvdisasm) -> the machine code view."""
from __future__ import annotations

from ..analysis.sass import SassReport, analyze_sass
from ..errors import DisassemblerError, NvccError
from ..passes.lower.cuda import render_cuda
from ..target import get_target
from ..trace import Context
from .disasm import disassemble, find_disassembler
from .nvcc import compile_cuda, nvcc_available


def require_sass_tools() -> None:
    """NvccError / DisassemblerError, with what to install, unless both tools are here."""
    if not nvcc_available():
        raise NvccError("the SASS view needs nvcc: install the CUDA toolkit, put nvcc on PATH, or set DEPLOKIT_NVCC")
    if find_disassembler() is None:
        raise DisassemblerError("the SASS view needs cuobjdump or nvdisasm: pip install nvidia-cuda-cuobjdump "
                                "(the `sass` extra), or set DEPLOKIT_CUOBJDUMP")


def compile_sass(cuda, kernel_program, arch: str, target_name: str | None = None) -> SassReport:
    """The SassReport of `cuda` (a CudaSource rendered for `target_name`) built for `arch`;
    another arch renders the Kernel IR `kernel_program` for it first."""
    require_sass_tools()
    source = cuda if arch == (target_name or arch) else render_cuda(kernel_program, Context(get_target(arch)))
    result = compile_cuda(str(source), source.build_arch(arch), kernel_names=source.kernels)
    dis = disassemble(result.cubin)
    tool = f"{dis.tool} {dis.version}".strip()
    return analyze_sass(dis.text, result.arch, tool, result.stats, order=source.kernels)


def sass_available() -> bool:
    return nvcc_available() and find_disassembler() is not None


__all__ = ["compile_sass", "require_sass_tools", "sass_available"]
