"""Kernel IR → CUDA: one translation unit holding every kernel of the program."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CudaSource:
    text: str
    target: str                    # sm_80 | sm_90 | sm_120
    kernels: tuple[str, ...]

    def __str__(self) -> str:
        return self.text


def render_cuda(program, ctx) -> CudaSource:
    from ...lower.cuda import render_program
    return CudaSource(render_program(program, ctx.target.sm), ctx.target.name,
                      tuple(k.name for k in program.kernels))
