"""Rows no tensor map can describe (011 tma_copy's skip path): repack the operand first.

A CUtensorMap's global strides must be multiples of 16 bytes, so a float32 matmul operand
whose rows hold a number of floats that is not a multiple of 4 (1000 x 777: rows 3108 bytes
apart) cannot be copied by TMA; 011 leaves it to cp.async, whose 16-byte copies need the
same alignment, so every thread issues 4-byte copies (16 per K step for a 128 x 128 x 16
block tile of 256 threads, instead of one TMA copy per operand).

A real compiler pays one more pass over the operand to get the cheap copies back: a small
elementwise kernel, launched just before the matmul, copies the operand into a workspace
whose rows are padded to a 16-byte multiple (the padding zero, as a tensor map's
out-of-bounds reads would be), and the matmul's stage reads the workspace through a tensor
map. Whether it pays is a cost decision, made per stage:

    saved   the K loop's copy issue slots: per K step of a block, each warp's 4-byte
            cp.async (COPY_SLOTS each) against one TMA copy (TMA_SLOTS in the producer's
            warp), over every K step of every wave, at the SMs' issue rate (4 a clock)
    cost    the repack's bytes (read the operand, write the padded workspace) at the DRAM
            peak, and one more launch

Small or memory-bound matmuls (few blocks, few K steps, a small register block for which
011 keeps cp.async anyway) keep their cp.async stages. 011's knob `repack` forces it (True),
turns it off (False) or decides by cost ("auto").

The decision is stamped on the matmul (TileKernel.repacks: the operand, its workspace, the
repack kernel) and the stage reads the workspace; RepackingPass adds the repack kernel
(scheduled by passes 001 to 010 like any elementwise kernel; 012 to 016 follow in the
pipeline) right before the matmul, and the workspace to the program's temporaries (the
launch plan places it in the scratch arena, as split-K's partials).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ...ir.index import var
from ...ir.loop_ir import Load, Loop, Store
from ...ir.tile_ir import BLOCK, THREAD, Repack, TileKernel
from ...ir.types import Buffer, TensorType
from ..record import KernelPass, Skip, program_types
from ..schedule.t001_tileify import PASS as P001
from ..schedule.t002_chunk_matmul_k import PASS as P002
from ..schedule.t003_split_matmul_k import PASS as P003
from ..schedule.t004_cooperative_reduce import PASS as P004
from ..schedule.t005_blockify_launch import PASS as P005
from ..schedule.t006_chunk_reduce import PASS as P006
from ..schedule.t007_stage_inputs import PASS as P007
from ..schedule.t008_register_tile import PASS as P008
from ..schedule.t009_permute_register_tile import PASS as P009
from ..schedule.t010_double_buffer import PASS as P010
from ..stage_geometry import head_stages, k_outer_loops
from ..tma.tma_geometry import FLOAT, GLOBAL_ALIGN, tensor_map_box

COPY_SLOTS = 6      # issue slots of one 4-byte cp.async in the K loop (address, bounds, LDGSTS): sm_90
                    # SASS of 1000x777 @ 777x1531 issues 1272 instructions per thread and K step of
                    # 1024 FFMA with 16 of them, 1173 with the same tile on TMA (the producer's
                    # slots included): ~6 each
TMA_SLOTS = 25      # one operand's share of the TMA producer's ~50 slots per K step (011)
LAUNCH_US = 2.5     # one more kernel launch (the cost model's launch_us)
# the repack kernel is scheduled by 001..010 (012..016 follow it in the pipeline): imported one by
# one, not from the package, whose SCHEDULE holds 011, which holds this module
EARLY_PASSES = (P001, P002, P003, P004, P005, P006, P007, P008, P009, P010)


def misaligned_rows(shape, dtype: str) -> bool:
    """A float32 tensor whose rows are not a multiple of 16 bytes apart (no tensor map)."""
    return dtype == "float32" and len(shape) > 1 and shape[-1] * FLOAT % GLOBAL_ALIGN != 0


def padded_shape(shape) -> tuple[int, ...]:
    """`shape` with its innermost extent rounded up to a 16-byte row."""
    per_row = GLOBAL_ALIGN // FLOAT
    return tuple(shape[:-1]) + (-(-shape[-1] // per_row) * per_row,)


@dataclass(frozen=True)
class RepackCost:
    saved_us: float           # the K loop's copy issue a tensor map saves
    cost_us: float            # the repack kernel: its bytes at the DRAM peak and its launch
    extra_bytes: int          # read + write of the repack

    @property
    def pays(self) -> bool:
        return self.saved_us > self.cost_us

    def text(self) -> str:
        return (f"saves ~{self.saved_us:.1f} us of cp.async issue in the K loop, costs ~{self.cost_us:.1f} us "
                f"({self.extra_bytes / 1e6:.1f} MB read + written, one launch)")


def _extent(kernel: TileKernel, kind: str) -> int:
    return math.prod(a.extent for a in kernel.tile().axes if a.kind == kind)


def repack_cost(kernel: TileKernel, stage, shape, target) -> RepackCost:
    """What repacking `stage`'s tensor (of `shape`) saves and costs on `target`."""
    tile = kernel.tile()
    steps = next((lp.extent for lp in k_outer_loops(tile) if stage in head_stages(lp)), 1)
    threads, blocks = _extent(kernel, THREAD), _extent(kernel, BLOCK)
    warps = -(-threads // 32)
    copies = -(-stage.size // (max(stage.unit, 1) * threads))          # cp.async per thread per K step
    slots = max(warps * copies * COPY_SLOTS - TMA_SLOTS, 0)            # per block and K step
    sms = target.sm_count or 132
    clock_mhz = target.peak_fp32_tflops * 1e6 / (2 * sms * target.fp32_lanes_per_sm)
    issue_per_us = 4 * clock_mhz                                       # warp instructions per SM per us
    waves = -(-blocks // sms)
    saved = steps * slots * waves / issue_per_us
    extra = FLOAT * (math.prod(shape) + math.prod(padded_shape(shape)))
    return RepackCost(saved, extra / (target.peak_bandwidth_gbs * 1e3) + LAUNCH_US, extra)


def plan_repack(kernel: TileKernel, stage, ttype, pctx):
    """(Repack, box, '') when `stage`'s tensor has rows no tensor map takes and the repack is
    chosen (knob `repack`: True, or "auto" and it pays); else (None, None, why not)."""
    mode = pctx.knobs.get("repack", False)
    if mode is False or not misaligned_rows(ttype.shape, ttype.dtype):
        return None, None, ""
    shape = padded_shape(ttype.shape)
    box, why = tensor_map_box(stage, shape, ttype.dtype)
    if why:
        return None, None, f"repacked into 16-byte rows, still no tensor map: {why}"
    cost = repack_cost(kernel, stage, ttype.shape, pctx.target)
    if mode == "auto" and not cost.pays:
        return None, None, f"not repacked: {cost.text()}"
    ws = f"{kernel.name}_{stage.tensor}_padded"
    repack = Repack(stage.tensor, ws, shape, f"{kernel.name}_repack_{stage.tensor}")
    how = "forced (repack=True)" if mode is True else cost.text()
    return repack, box, (f"{stage.name}: {stage.tensor}'s rows are {ttype.shape[-1] * FLOAT} bytes apart: staged from "
                         f"{ws} {shape} (rows of {shape[-1] * FLOAT} bytes) that {repack.kernel} fills first; {how}")


def workspace_buffer(repack: Repack, dtype: str = "float32") -> Buffer:
    return Buffer(repack.workspace, TensorType(repack.shape, dtype), "temp")


def with_workspaces(types, kernel) -> dict:
    """`types` (tensor name -> TensorType) and the workspaces `kernel`'s repacks stage from."""
    return dict(types, **{r.workspace: TensorType(r.shape, types[r.tensor].dtype)
                          for r in getattr(kernel, "repacks", ()) if r.workspace not in types})


def repack_kernel(repack: Repack, source: TensorType, owner: str, target, types, ctx=None) -> TileKernel:
    """The elementwise kernel workspace[i.., j] = tensor[i.., j] (0 for j past the row),
    scheduled by passes 001 to 010 with their default knobs."""
    idx = tuple(var(f"a{d}") for d in range(len(repack.shape)))
    body: tuple = (Load("v0", repack.tensor, idx, pad=0.0), Store(repack.workspace, idx, "v0"))
    for d in reversed(range(len(repack.shape))):
        body = (Loop(f"a{d}", repack.shape[d], "free", body),)
    kernel = TileKernel(repack.kernel, (repack.workspace,), body, repacks_for=owner)
    types = dict(types, **{repack.workspace: TensorType(repack.shape, source.dtype)})
    for p in EARLY_PASSES:
        result, _ = p.apply_to(kernel, target, p.knob_values(kernel, target, {}), types, ctx)
        if not isinstance(result, Skip):
            kernel = result
    return kernel


class RepackingPass(KernelPass):
    """011 as a KernelPass whose program step also adds each repack kernel 011 chose (right
    before the kernel it serves) and its workspace (a temporary), as 003's step adds its
    reducers; the tuner's per-kernel `apply_to` rewrites only the matmul."""

    def run(self, program, ctx):
        step = super().run(program, ctx)
        after = step.after
        before = {k.name: k for k in program.kernels}
        types = program_types(after)
        kernels, written = [], list(after.written)
        for k in after.kernels:
            fresh = [r for r in k.repacks if r not in getattr(before.get(k.name), "repacks", ())]
            for r in fresh:
                kernels.append(repack_kernel(r, types[r.tensor], k.name, ctx.target, types, ctx))
                written.append(workspace_buffer(r, types[r.tensor].dtype))
            kernels.append(k)
        if len(kernels) == len(after.kernels):
            return step
        return dataclasses.replace(step, after=dataclasses.replace(after, kernels=tuple(kernels),
                                                                   written=tuple(written)))
