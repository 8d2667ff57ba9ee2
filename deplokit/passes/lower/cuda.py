"""Kernel IR -> CUDA C++: one `extern "C"` kernel per KernelFunc, printed as a careful CUDA
engineer would write it.

    render_kernel(k, target_sm)   the text of one kernel (compiles on its own: it needs no
                                  include and no helper)
    render_program(p, target_sm)  one translation unit holding every kernel of a program
    render_cuda(program, ctx)     that translation unit as a CudaSource, for the pipeline's
                                  target (`ctx.target`)
    format_float(value)           the exact C literal of a float32 constant

The printer is a direct mapping, statement for statement; it makes no scheduling decision
and adds no barrier (the Kernel IR says where `__syncthreads()` goes). What it owns:

* Types. Index arithmetic is `int`, values are `float`, predicates `bool`. Every Kernel-IR
  variable is a register of the thread that declares it. A buffer parameter points to
  `float`, `long long` (int64) or `int` (int32); read-only ones are `const`, and all are
  `__restrict__` (deplokit buffers never alias).
* Indices are non-negative: `//` prints as C's `/` and `%` as C's `%` on ints, which
  truncate towards zero and so agree with Python's floor division only for non-negative
  operands, which every index deplokit computes is (`/` of two ints is C's too). On floats,
  `//` is `floorf(a / b)` and `%` is `fmodf`. `min`/`max` are `min()`/`max()` on ints and, on
  floats, `deplokit_fminf`/`deplokit_fmaxf` (PTX `min.NaN`/`max.NaN`, declared once where
  used): NaN where either operand is NaN, as torch's maximum, amax, relu and clamp give,
  where C's `fminf`/`fmaxf` would return the other operand.
* Thread coordinates. `tid.x` is `threadIdx.x`, `bid.x` is `blockIdx.x`, `bdim.x` (or
  `ntid.x`) is `blockDim.x`, `gdim.x` (or `nctaid.x`) is `gridDim.x`; these CUDA builtins
  are unsigned, so they print as `(int)threadIdx.x` inside larger expressions.
  `lane` and `warp` are the lane and warp of the flattened thread id (`threadIdx.x` for a
  1-D block), declared once at the top of the kernel when used.
* Float constants print exactly: the shortest decimal that names the same float32 (a
  kernel computes in float32), with an `f` suffix: `1e-06f`, `2048.0f`; infinities and NaN
  as CUDA's `INFINITY`, `-INFINITY`, `NAN`.
* Asynchronous copies are inline PTX, so the instruction issued is on the page:
  `cp.async.{ca,cg}.shared.global` (sm_80+; `cg`, which bypasses L1, for 16 bytes),
  `cp.async.commit_group`, `cp.async.wait_group N`; TMA tensor-map copies
  `cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes` (N = the
  map's rank, coordinates innermost first; the kernel takes each map as a
  `const __grid_constant__ deplokit_tensor_map` parameter after its buffers, the 128-byte
  layout of cuda.h's CUtensorMap declared once per translation unit) and 1-D bulk copies
  `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`, completing on an
  mbarrier (`mbarrier.init` / `mbarrier.arrive.expect_tx` / `mbarrier.try_wait.parity`),
  sm_90+ (plain sm_90, no `sm_90a` needed; sm_120 accepts them too). Rendering one of them
  for a target that lacks it raises ValueError.
* TMA and mbarrier semantics. Every mbarrier named by an `MbarrierInit` is a shared
  `unsigned long long`, declared at the top of the kernel. `MbarrierInit`, `TmaLoad` and
  `TmaTensorLoad` are issued by one thread: where they stand outside any `If` (every thread of the block reaches
  them) the printer guards them with `if (<flat thread id> == 0)`; inside an `If`, that
  `If`'s condition is the election and must select one thread. Each `TmaLoad` and
  `TmaTensorLoad` is one arrival (with its byte count, the box's for a tensor copy, as the
  transaction count), so an mbarrier expects as many arrivals per phase
  (`MbarrierInit.count`) as copies complete on it. Other threads may use an
  mbarrier only after a `Barrier` that follows its `MbarrierInit`. `MbarrierWait` is
  executed by every thread that reaches it; its phase prints as `phase & 1` (the parity).
* `AtomicAdd` prints as `atomicAdd(&buffer[offset], value);` (float atomics on global
  memory, every target): the adds land in an unspecified order.
* Output is deterministic (same tree, same bytes) with 4-space indentation.

The renderer is split by job: `cuda_expr` (types, literals, operator precedence and the
function tables; the expression printer), `cuda_ptx` (inline PTX and intrinsics: cp.async,
TMA copies, mbarriers, atomicAdd) and `cuda_render` (statements, the kernel and the
program). This module is the public entry.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...display import Displayable
from .cuda_expr import format_float
from .cuda_render import render_kernel, render_program

__all__ = ["CudaSource", "render_cuda", "render_kernel", "render_program", "format_float"]


@dataclass(frozen=True)
class CudaSource(Displayable):
    text: str
    target: str                    # sm_80 | sm_90 | sm_120
    kernels: tuple[str, ...]

    def __str__(self) -> str:
        return self.text


def render_cuda(program, ctx) -> CudaSource:
    return CudaSource(render_program(program, ctx.target.sm), ctx.target.name,
                      tuple(k.name for k in program.kernels))
