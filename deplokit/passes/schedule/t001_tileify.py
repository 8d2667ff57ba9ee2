"""001 tileify: lift the kernel's outer free loops to THREAD axes of a Tile.

The perfectly nested free loops at the top of a Loop-IR kernel become the axes of one Tile:
every iteration is a thread. Values hoisted between two of them move into the inner one first. Later passes
decide which threads share a block."""
from __future__ import annotations

import dataclasses

from ...ir.loop_ir import Accumulate, Compute, Load, Loop, LoopProgram, walk
from ...ir.tensor_ir import CONVERT_OP, TF32_OP
from ...ir.tile_ir import THREAD, Tile, TileAxis, TileKernel, TileProgram
from ...ir.types import HALF_DTYPES
from ..flash.flash_mma_lower import is_flash_mma
from ..flash.flash_mma_tile import flash_mma_tile
from ..flash.flash_tile import flash_tile
from ..record import KernelPass, PassContext, Skip

DESCRIPTION = "lift outer free Loops to thread axes"


def apply(kernel: TileKernel, pctx: PassContext):
    if any(isinstance(s, Tile) for s in kernel.body):
        return Skip("already tiled")
    if is_flash_mma(kernel):           # on tensor cores: what the record's kernel does (fragments, mma)
        return flash_mma_tile(kernel, pctx.types)
    if kernel.flash is not None:       # flash attention: its whole schedule, from the plan fusion recorded
        return flash_tile(kernel)
    # precision="tf32" rounded the matmul's operands (decompose/matmul.contract): recorded here,
    # where the kernel becomes Tile IR, for the lowering that picks the multiply instruction
    if any(isinstance(s, Compute) and s.op == TF32_OP for s, _ in walk(kernel.body)):
        kernel = dataclasses.replace(kernel, precision="tf32")
    elif (half := half_operands(kernel, pctx.types)):
        # both operands of its summed product are half values (converted exactly at the load):
        # an mma.sync m16n8k16 lowering may read them raw (008)
        kernel = dataclasses.replace(kernel, precision=half)
    loops = [s for s in kernel.body if isinstance(s, Loop)]
    first = next((i for i, s in enumerate(kernel.body) if isinstance(s, Loop)), len(kernel.body))
    uniform = kernel.body[:first]
    if len(loops) != 1 or loops[0].kind != "free" or first != len(kernel.body) - 1:
        # a whole-tensor reduction or a scalar: one Tile with no axes; what follows the
        # first loop (the reduce, then the values and stores that need it) stays in order
        return dataclasses.replace(kernel, body=uniform + (Tile((), kernel.body[first:]),))
    axes, body = [], (loops[0],)
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "free":
        loop = body[0]
        axes.append(TileAxis(loop.var, loop.extent, THREAD, loop.role))
        body = _sink_invariants(loop.body)
    # A free loop followed by statements at the same level stays a loop inside the Tile.
    return dataclasses.replace(kernel, body=uniform + (Tile(tuple(axes), body),))


def half_operands(kernel, types) -> str:
    """The half dtype both factors of the kernel's summed product are read from (each a
    `convert -> float32` of a load of a tensor of that dtype), else ''."""
    stmts = [s for s, _ in walk(kernel.body)]
    loads = {s.dst: s.tensor for s in stmts if isinstance(s, Load)}
    converts = {s.dst: s.args[0] for s in stmts if isinstance(s, Compute) and s.op == CONVERT_OP
                and s.dtype == "float32" and len(s.args) == 1}
    summed = {s.value for s in stmts if isinstance(s, Accumulate) and s.reduction == "sum"}
    for s in stmts:
        if isinstance(s, Compute) and s.op == "multiply" and s.dst in summed and len(s.args) == 2:
            dtypes = {getattr(types.get(loads.get(converts.get(a))), "dtype", "") for a in s.args}
            if len(dtypes) == 1 and next(iter(dtypes)) in HALF_DTYPES:
                return next(iter(dtypes))
    return ""


def _sink_invariants(body: tuple) -> tuple:
    """Values hoisted out of a free loop (loop-invariant code motion in fusion), moved into
    it when it is all that follows them: every iteration becomes a thread, which computes
    them anyway, instead of the loop staying sequential inside each thread."""
    if body and isinstance(body[-1], Loop) and body[-1].kind == "free" and len(body) > 1 \
            and all(isinstance(s, (Load, Compute)) for s in body[:-1]):
        inner = body[-1]
        return (dataclasses.replace(inner, body=body[:-1] + inner.body),)
    return body


def as_tile_program(program: LoopProgram) -> TileProgram:
    """Loop IR as Tile IR before any pass: each kernel one thread of one block."""
    return TileProgram(
        program.buffers,
        program.written,
        tuple(TileKernel(k.name, k.outputs, k.body, locals=k.locals, flash=k.flash) for k in program.kernels),
        program.outputs,
    )


PASS = KernelPass("001_tileify", "tile", DESCRIPTION, apply, prepare=as_tile_program, flash_aware=True)
