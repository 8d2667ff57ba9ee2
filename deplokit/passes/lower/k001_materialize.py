"""k001 materialize: Tile IR -> Kernel IR, one Kernel-IR function per Tile-IR kernel.

THREAD/BLOCK axes become threadIdx/blockIdx arithmetic; loads and stores become flat
global (or shared) accesses, masked where the rounding of an axis to whole blocks could
leave the tensor; a load from a staged slab reads its shared array (the current buffer of a
double-buffered one); Combine becomes a warp-shuffle tree (combine.py). A Stage, an
AsyncWait and a K loop with stages at its head are left as StageCopy / StageWait /
StagePrologue (deplokit.ir.kernel_ir), each recording where it stands, for
002_stage_copies to spell as copies, waits and barriers.

Register tiles (008 register_tile stamps their shapes on the kernel, TileKernel.register_tiles):
an accumulator written with an index becomes a per-thread register array (DeclareArray, at
the identity, before the first reduce loop that folds into it; Accumulate -> Assign of one
element; `load acc[..]` -> RegLoad), and every register loop becomes a `#pragma unroll` For,
so each element index is a compile-time constant and the array stays in registers.

A register loop whose slots read a staged slab in quads (4 adjacent aligned floats) loads each
quad with one shared float4 (register_quads.py). A vector loop (005 blockify_launch) is unrolled into per-lane
registers, with a float4 for
each access 005 stamped 4 wide and each load from a stage stamped one shared float4
(Load.shared_width) (vector_access.py).

Any Tile IR materialises, also before blockify: then the block may hold more threads than
a GPU allows, which only the simulator runs (check_passes)."""
from __future__ import annotations

import dataclasses

from ...ir import kernel_ir as K
from ...ir.index import Affine, gathers
from ...ir.kernel_expr import affine_expr, flat_offset
from ...ir.kernel_ir import KernelFunc, KernelProgram, StageCopy, StagePrologue, StageWait
from ...ir.lanes import multiples_of
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.smem_layout import PlacedStage, smem_offset, smem_size, stage_value_dtype
from ...ir.stages import head_stages
from ...ir.tensor_ir import reduction_identity
from ...ir.tile_ir import (
    Assign,
    AsyncWait,
    Combine,
    SplitArrive,
    Stage,
    StridedLoop,
    TileProgram,
    accumulators,
    map_body,
    walk,
)
from ...ir.types import DTYPE_CTYPE, shared_ctype, value_dtype
from ...ir.value_expr import combine_expr, constant, lower_value
from ...target import VECTOR
from ..flash.flash_mma_lower import is_flash_mma, lower_flash_mma
from ..flash.flash_registers import flash_min_blocks
from ..mma import mma_lower
from ..record import Noted, Pass
from ..split import stream_k
from ..split.split_tail import arrive
from ..wgmma import wgmma_lower
from ..wgmma.wgmma_lower import fenced
from .combine import lower_combine
from .local_rows import LocalRows
from .lowering_state import LoweringState
from .register_quads import lower_quads, quad_loads
from .stage_plan import plan_stage, slot_of
from .vector_access import lower_vector_loop

# The tensor cores' Tile-IR statements (ir/tile_mma.py), lowered by plain functions of their
# features' modules that take the Materializer as their first argument (passes/mma/mma_lower.py,
# passes/wgmma/wgmma_lower.py): each module's LOWERINGS table says which lowers which.
FEATURE_STATEMENTS = {**mma_lower.LOWERINGS, **wgmma_lower.LOWERINGS, **stream_k.LOWERINGS}


def apply(program: TileProgram, pctx=None):
    types = program.types()
    notes: list[str] = []
    kernels = tuple(_materialize(k, types, notes) for k in program.kernels)
    out = KernelProgram(program.buffers, program.written, kernels, program.outputs)
    return Noted(out, tuple(notes)) if notes else out


def _materialize(kernel, types, notes: list) -> KernelFunc:
    if is_flash_mma(kernel):            # flash attention on tensor cores: spelled from its record
        return lower_flash_mma(kernel, types)
    if kernel.split_k is not None and kernel.split_k.stream_k:   # 003's stream-K: the chunks dealt to workers
        dealt = stream_k.deal(kernel)
        if isinstance(dealt, str):
            notes.append(f"{kernel.name}: not dealt to stream-K workers: {dealt}; the last of each tile's "
                         f"{kernel.split_k.splits} split blocks adds the partials")
        else:
            kernel, plan = dealt
            notes.append(f"{kernel.name}: {plan.text()}")
    return Materializer(kernel, types).run()


PASS = Pass("001_materialize", "kernel", "spell each scheduled kernel in hardware primitives: thread "
            "indices, guarded accesses, shared-memory copies and barriers, shuffles, register tiles", apply)


class Materializer(LoweringState):
    """Walks one kernel's statements; stage copies, vector loops, Combines and local rows are
    spelled by their own modules, which call back `stmt` / `loop` for what they contain."""

    def __init__(self, kernel, types):
        super().__init__(kernel, types)
        self.accs: set[str] = set()              # accumulators declared so far
        self.in_reduce = False
        self.local_rows = LocalRows(kernel, self.tile, flat_offset, affine_expr)   # row fusion's on-chip rows
        self.vector_multiples = multiples_of(self.tile.body, VECTOR)   # bounds of float4 runs
        self.body_loop = None                    # (Tile Loop, depth of its statement) whose body is lowered

    def run(self) -> KernelFunc:
        body: list = []
        body += _decompose("tid", K.Special("tid.x"), self.thread_axes)
        body += _decompose("bid", K.Special("bid.x"), self.block_axes)
        body += self.stage_origins()
        body += self.local_rows.declarations()
        carried = {a.dst for a, _ in walk(self.tile.body) if isinstance(a, Assign) and a.index}
        body += [K.DeclareArray(r.acc, r.size) for r in self.kernel.register_tiles if r.acc in carried]
        body += mma_lower.declarations(self.kernel)
        body += self.stmts(self.uniform)
        body += self.stmts(self.staged_body)
        return KernelFunc(self.kernel.name, self.params(), (self.blocks, 1, 1), (self.threads, 1, 1), tuple(body),
                          reduces_for=self.kernel.reduces_for,
                          repacks_for=self.kernel.repacks_for,
                          index_bits=self.index_bits, min_blocks=flash_min_blocks(self.kernel, self.threads))

    # -- statements ----------------------------------------------------------------------------
    def stmts(self, body) -> list:
        out: list = []
        local_barriers = self.local_rows.barriers(body)
        for i, s in enumerate(body):
            if isinstance(s, (Loop, StridedLoop)) and head_stages(s):   # the first tile's copies, an mbarrier
                out.append(StagePrologue(s, self.loop_depth, tuple(self.ranges.items())))
            if local_barriers[i]:
                out.append(K.Barrier())              # a local row written by the block is read
            if isinstance(s, SplitArrive):           # the rest runs in the tile's last block only
                self.note_write(s.counter)
                return out + arrive(s, self.block_axes, self.fresh, self.stmts(body[i + 1:]))
            out += self.stmt(s)
        return out

    def stmt(self, s) -> list:
        if isinstance(s, Load):
            if self.kernel.register_tile(s.tensor) is not None:
                dtype = self.dtypes.get(s.tensor, "float32")
                self.dtypes[s.dst] = dtype
                return [
                    K.Declare(s.dst, DTYPE_CTYPE[dtype], K.RegLoad(s.tensor, self.register_index(s.tensor, s.index)))
                ]
            return self.load(s)
        if isinstance(s, Compute):
            self.dtypes[s.dst] = s.dtype            # a vector loop's per-lane values too
            # a position may be a gathered id (a tril mask read through x[ids]): loaded first
            pre: list = []
            width = "int32" if self.index_bits == 32 else "int64"
            args = [(self.index_exprs((a,), pre)[0], width) if isinstance(a, Affine) else self.typed_operand(a)
                    for a in s.args]
            return pre + lower_value(s.dst, s.op, args, s.dtype, self.fresh)
        if isinstance(s, Accumulate):
            value = self.value_as(s.value, s.dtype)
            if s.index:
                idx = self.register_index(s.acc, s.index)
                return [K.Assign(s.acc, combine_expr(s.reduction, K.RegLoad(s.acc, idx), value, s.dtype), idx)]
            return [K.Assign(s.acc, combine_expr(s.reduction, K.Var(s.acc), value, s.dtype))]
        if isinstance(s, Assign):       # a carried variable (float32): the first Assign declares it
            value = self.value_as(s.value, "float32")
            self.dtypes[s.dst] = "float32"
            if s.index:
                return [K.Assign(s.dst, value, self.register_index(s.dst, s.index))]
            if s.dst in self.accs:
                return [K.Assign(s.dst, value)]
            self.accs.add(s.dst)
            return [K.Declare(s.dst, "float", value)]
        if isinstance(s, Store):
            if s.tensor in self.local_rows:
                return self.local_rows.store(s, self.operand(s.value))
            return self.write(s)
        if isinstance(s, Loop) and s.kind == "vector":      # 4 elements per thread: float4 accesses
            return lower_vector_loop(self, s)
        if isinstance(s, (Loop, StridedLoop)):
            return self.loop(s)
        if isinstance(s, Combine):
            return lower_combine(self, s)
        if isinstance(s, Stage):
            return self.stage(s)
        if isinstance(s, AsyncWait):
            return [StageWait(s)]
        if type(s) in FEATURE_STATEMENTS:
            return FEATURE_STATEMENTS[type(s)](self, s)
        raise TypeError(f"cannot materialise {type(s).__name__}")

    def loop(self, s) -> list:
        pre = []
        if s.kind == "reduce" and not self.in_reduce:
            # declared once, before the first reduce loop that folds into it (a K tail
            # loop goes on accumulating what the chunked loop started)
            for acc, red in accumulators(s.body):
                if acc not in self.accs:
                    self.accs.add(acc)
                    tile = self.kernel.register_tile(acc)
                    dtype = self.dtypes.get(acc, "float32")
                    if tile is not None:
                        pre.append(K.DeclareArray(acc, tile.size, reduction_identity(red, dtype), DTYPE_CTYPE[dtype]))
                    else:
                        pre.append(K.Declare(acc, DTYPE_CTYPE[dtype], constant(reduction_identity(red, dtype), dtype)))
        outer_reduce, outer_loop = self.in_reduce, self.body_loop
        self.in_reduce = outer_reduce or s.kind == "reduce"
        # the loop a stage in its body is copied for (a causal key loop is a StridedLoop)
        self.body_loop = (s, self.loop_depth) if isinstance(s, Loop) or s.kind == "serial" else None
        self.loop_depth += 1
        quads = quad_loads(self, s) if isinstance(s, Loop) else []
        if quads:                        # slots 4q .. 4q+3 of a load are one shared float4
            loop = lower_quads(self, s, quads)
        elif isinstance(s, Loop):
            self.ranges[s.var] = s.extent
            body = self.stmts(s.body)
            # a register loop is always unrolled: its variable indexes register arrays
            stop = K.Const(s.extent, "int")
            if s.stop is not None:      # a runtime bound, at most the extent: min(extent, stop)
                bound = self.index_exprs((s.stop,), pre)[0]
                stop = K.Select(K.Binary("<", bound, stop), bound, stop)
            loop = K.For(s.var, K.Const(0, "int"), stop, K.Const(1, "int"), tuple(body),
                         s.unroll or s.kind == "register")
        else:
            self.ranges[s.var] = s.stop
            body = self.stmts(s.body)
            loop = K.For(s.var, affine_expr(s.start), K.Const(s.stop, "int"), K.Const(s.step, "int"), tuple(body),
                         s.unroll)
        self.loop_depth -= 1
        self.in_reduce, self.body_loop = outer_reduce, outer_loop
        return pre + (loop if isinstance(loop, list) else fenced(s, loop))

    def stage_origins(self) -> list:
        """A stage whose origin gathers a block-uniform integer (a grouped matmul's tile
        rows, x[base[p] + i, k]): each such integer loaded once, at the kernel's start, and
        the stages rewritten to read the registers, so that every copy of them (a ring's
        prologue included) does."""
        out: list = []
        loaded: dict = {}

        def rewrite(s):
            if isinstance(s, Stage) and any(gathers(o) for o in s.origin):
                return dataclasses.replace(s, origin=tuple(self.gathers_loaded(o, out, loaded) for o in s.origin))
            return s
        self.staged_body = map_body(self.tile.body, rewrite)
        # at least 0: the copies test only an origin's upper end (stage_units.clamped_global)
        return [dataclasses.replace(d, init=K.Binary("max", d.init, K.Const(0, "int"))) for d in out]

    def stage(self, s: Stage) -> list:
        """Place the stage (loads from it read the buffer of the current iteration) and leave
        its copy to 002_stage_copies."""
        plan = plan_stage(self, s, self.body_loop)
        for t in s.prologue.inputs if s.prologue else (s.tensor,):
            self.note_read(t)
        base = None
        if plan.buffered:                      # the slot ko % buffers of its ring
            base = K.Binary("*", slot_of(plan, "cur"), K.Const(smem_size(s), "int"))
        self.stages[s.name] = PlacedStage.of(s, base)
        return [StageCopy(s, self.body_loop, self.loop_depth, tuple(self.ranges.items()))]

    # -- memory --------------------------------------------------------------------------------
    def load(self, s: Load) -> list:
        if s.tensor in self.local_rows:
            return self.local_rows.load(s)
        if s.dst in self.quad_picks:         # read in place: a component of a shared float4 (register_quads.py)
            return []
        if s.tensor in self.stages:
            stage = self.stages[s.tensor]
            offset = smem_offset([affine_expr(e) for e in s.index], stage)
            dtype = stage_value_dtype(stage, self.types[stage.tensor].dtype)
            ctype = shared_ctype(dtype)
            self.dtypes[s.dst] = dtype if ctype != "float" else "float32"
            return [K.Declare(s.dst, ctype, K.SharedLoad(stage.name, offset))]
        out: list = []
        shape = self.types[s.tensor].shape
        exprs = self.index_exprs(s.index, out)
        self.note_read(s.tensor)
        # a half element is read as float (__bfloat162float): its Loop-IR convert is then exact
        dtype = value_dtype(self.types[s.tensor].dtype)
        self.dtypes[s.dst] = dtype
        cond, safe = self.guard(s.index, exprs, shape)
        value = K.GlobalLoad(s.tensor, flat_offset(safe, shape), DTYPE_CTYPE[dtype])
        if cond is not None:
            value = K.Select(cond, value, constant(s.pad or 0, dtype))
        out.append(K.Declare(s.dst, DTYPE_CTYPE[dtype], value))
        return out

    def write(self, s) -> list:
        """A store to a global tensor, masked where its index can leave it."""
        out: list = []
        shape = self.types[s.tensor].shape
        exprs = self.index_exprs(s.index, out)
        self.note_write(s.tensor)
        cond, _ = self.guard(s.index, exprs, shape)
        write = K.GlobalStore(s.tensor, flat_offset(exprs, shape), self.value_as(s.value, self.types[s.tensor].dtype))
        out.append(write if cond is None else K.If(cond, (write,)))
        return out


def _decompose(flat_name, special, axes) -> list:
    """Declare each axis's variable from the flat thread (or block) index, the last axis the
    fastest."""
    if not axes:
        return []
    if len(axes) == 1:
        return [K.Declare(axes[0].var, "int", special)]
    out = [K.Declare(flat_name, "int", special)]
    stride = 1
    for a in reversed(axes):
        e = K.Var(flat_name)
        if stride > 1:
            e = K.Binary("/", e, K.Const(stride, "int"))
        if a is not axes[0]:
            e = K.Binary("%", e, K.Const(a.extent, "int"))
        out.append(K.Declare(a.var, "int", e))
        stride *= a.extent
    return out
