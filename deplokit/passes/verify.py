"""The invariants of Tile IR and Kernel IR, checked where one stage hands over to the next.

A pass that breaks one (a value read before it is computed, a loop variable used outside
its loop, a float4 stamped on an access that is no longer aligned, a barrier only some
threads reach) would otherwise surface as a wrong number, a hang or an nvcc error far from
its cause. The pipeline verifies every Tile and Kernel program it produces, check_passes
verifies the Tile IR after each scheduling pass, and tests verify IR they build by hand.

    verify(ir, target)   -> None, or raises IRInvariantError naming the invariant

Tile IR (per kernel)
  names-declared     a value (load, compute, accumulator) is defined before it is read,
                     in its body or an enclosing one
  tensors-known      every load and store names a program buffer, a local, a stage in scope
                     or an accumulator; a stage copies a program buffer
  loop-vars-bound    every index variable is a tile axis or an enclosing loop's variable
  tma-stamp          a TMA stage carries the box its slab is and a swizzle the box allows
                     (tma_geometry), any other stage none
  copy-unit          a stage's copy unit (Stage.unit) is the one its rows, pad and copy kind allow
                     (stage_geometry.copy_unit)
  stage-smem         the stages' buffers fit in the shared memory a block may use (the target's
                     dynamic limit, less 1 KiB: stage_geometry.stage_smem_budget)
  vector-width       an access stamped 4 wide (005) sits in a vector loop of 4 and is still
                     one aligned float4 (deplokit.passes.vector_geometry)
  shared-width       a load from a stage is stamped one shared float4 (Load.shared_width)
                     exactly where it sits in a vector loop of 4 and the stage's slab, pad and
                     buffers keep its 4 floats aligned (vector_geometry.shared_width)
  register-tiles     an indexed accumulator has a register tile stamped (008) whose rank and
                     extents match the register loops indexing it
  mma-fragments      a FragmentLoad or MmaSync (008 on tensor cores) names the kernel's MmaTile:
                     its fragment arrays, accumulator and instruction, a stage in scope, and
                     layouts each a permutation of its operand
  split-k            a split kernel (003) stores into its declared workspace, and its reducer
                     comes right after it and names it
  local-rows         an access of a local (one row on chip, passes/rows/rows.py) indexes its
                     dims outside the row by the tile's axes only, never by a loop
Kernel IR (per function)
  names-declared     variables, register arrays, shared arrays, mbarriers and buffers are
                     declared (parameters for buffers) before they are used
  uniform-barriers   no barrier (nor an elected issue, If.elect) in a branch or loop some threads skip
  static-smem        static shared memory fits the static limit per block, static and dynamic
                     (KernelFunc.dynamic_smem) the target's dynamic limit
"""
from __future__ import annotations

from ..errors import IRInvariantError
from ..ir import kernel_ir as K
from ..ir.index import Affine, covers_once, free_vars, gathers
from ..ir.kernel_cp_async import CpAsync
from ..ir.kernel_ir import KernelProgram, declared_smem_bytes
from ..ir.kernel_split import AtomicInc, Broadcast
from ..ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait, TmaLoad, TmaTensorLoad
from ..ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ..ir.tile_ir import (
    Assign,
    AsyncWait,
    Combine,
    FragmentLoad,
    MmaSync,
    Stage,
    StridedLoop,
    Tile,
    TileKernel,
    TileProgram,
    WarpgroupMma,
)
from ..target import STATIC_SMEM_PER_BLOCK
from .flash.flash_mma_tile import flash_mma_operands
from .stage_geometry import VECTOR, block_threads, copy_unit, smem_bytes, stage_smem_budget
from .tma.tma_geometry import swizzle_for, tensor_map_box
from .vector_geometry import float4_reason, load_shared_width, multiples_of_vector


def verify(ir, target=None) -> None:
    """Check a Tile or Kernel program (any other IR passes unchecked). Without a target, a
    Kernel program's shared memory is not checked: a Tile program materialised before 005
    blockify_launch (check_passes) may give each of many threads a row, which only the
    simulator runs."""
    limit = target.static_smem_per_block if target is not None else STATIC_SMEM_PER_BLOCK
    if isinstance(ir, TileProgram):
        stage_limit = stage_smem_budget(target) if target is not None else STATIC_SMEM_PER_BLOCK
        for i, k in enumerate(ir.kernels):
            _TileChecker(k, ir, stage_limit).run()
            if k.split_k is not None:
                _check_split(k, ir.kernels[i + 1] if i + 1 < len(ir.kernels) else None, ir)
            check_repacks(k, ir.kernels[:i], ir)      # 011's copies, launched before it
    elif isinstance(ir, KernelProgram):
        for f in ir.kernels:
            _KernelChecker(f, limit if target is not None else None,
                           target.dynamic_smem_per_block if target is not None else None).run()


# -- Tile IR -------------------------------------------------------------------------------------

def _check_split(k, nxt, program) -> None:
    split = k.split_k
    types = program.types()
    if split.workspace not in types or not k.outputs or k.outputs[0] != split.workspace:
        raise IRInvariantError("Tile", "split-k", k.name, f"the workspace {split.workspace} is not a declared "
                                                          f"buffer the kernel writes")
    if split.in_kernel:       # the kernel's last block per tile reduces: its counters, no reducer
        counter = types.get(split.counter)
        if counter is None or counter.dtype != "int32" or len(k.outputs) != 2:
            raise IRInvariantError("Tile", "split-k", k.name, f"an in-kernel reduction needs its int32 counter "
                                                              f"{split.counter} and writes its output")
        return
    if k.outputs != (split.workspace,):
        raise IRInvariantError("Tile", "split-k", k.name, f"the kernel writes {', '.join(k.outputs)} besides "
                                                          f"its workspace; its reducer writes the output")
    if nxt is None or nxt.name != split.reducer or nxt.reduces_for != k.name:
        raise IRInvariantError("Tile", "split-k", k.name, f"its reducer {split.reducer} does not follow it")


class _TileChecker:
    def __init__(self, kernel, program, limit):
        self.k, self.limit = kernel, limit
        self.types = program.types()
        tiles = [s for s in kernel.body if isinstance(s, Tile)]
        self.tile = tiles[0] if tiles else None
        body = self.tile.body if self.tile else kernel.body
        self.accs = {s.acc for s in _tile_walk(kernel.body) if isinstance(s, Accumulate)} | \
            {s.dst for s in _tile_walk(kernel.body) if isinstance(s, Assign)} | \
            {s.acc for s in _tile_walk(kernel.body) if isinstance(s, (MmaSync, WarpgroupMma))}    # carried, mma
        self.stage_names = {s.name for s in _tile_walk(kernel.body) if isinstance(s, Stage)}
        self.locals = kernel.local_names()
        self.multiples = multiples_of_vector(body)

    def fail(self, invariant, detail):
        raise IRInvariantError("Tile", invariant, self.k.name, detail)

    def run(self):
        axes = {a.var: a.extent for a in self.tile.axes} if self.tile else {}
        values = set(self.accs)
        stages = {}                               # name -> Stage in scope
        for s in self.k.body:
            if isinstance(s, Tile):
                self.body(s.body, dict(axes), set(values), dict(stages), ())
            else:
                self.stmt(s, axes, values, stages, ())
        if self.tile is not None and smem_bytes(self.tile) > self.limit:
            self.fail("stage-smem", f"the stages take {smem_bytes(self.tile)} bytes of shared memory, more than "
                                    f"the {self.limit} bytes a block may use")

    def body(self, body, bound, values, stages, loops):
        for s in body:
            self.stmt(s, bound, values, stages, loops)

    def stmt(self, s, bound, values, stages, loops):
        if isinstance(s, (Loop, StridedLoop)):
            if isinstance(s, StridedLoop):
                self.index((s.start,), bound, lambda: f"the start of loop {s.var}")
            inner = dict(bound)
            inner[s.var] = s.extent if isinstance(s, Loop) else s.stop
            self.body(s.body, inner, set(values), dict(stages), loops + (s,))
            return
        if isinstance(s, Stage):
            if s.tensor not in self.types:
                self.fail("tensors-known", f"stage {s.name} copies {s.tensor}, which is no buffer of the program")
            self.index(s.origin, bound, lambda: f"the origin of stage {s.name}")
            self.tma(s, bound)
            self.unit(s, bound)
            stages[s.name] = s
            return
        if isinstance(s, (Load, Store)):
            known = s.tensor in self.types or s.tensor in self.locals or s.tensor in stages or \
                (isinstance(s, Load) and s.tensor in self.accs)
            if not known:
                self.fail("tensors-known", f"{s.text()}: {s.tensor} is no buffer, local, stage in scope or accumulator")
            self.index(s.index, bound, s.text)
            if s.tensor in self.locals:
                self.local_row(s)
            if isinstance(s, Load) and s.tensor in self.accs and s.index:
                self.register_index(s.tensor, s.index, loops, s.text)
            if isinstance(s, (Load, Store)) and s.width != 1:
                self.width(s, loops)
            if isinstance(s, Load):
                self.shared(s, stages, loops)
        if isinstance(s, Compute):
            self.reads(s.args, values, s.text)
            for a in s.args:
                if isinstance(a, Affine):
                    self.index((a,), bound, s.text)
        elif isinstance(s, (Accumulate, Store, Assign)):
            self.reads((s.value,), values, s.text)
        if isinstance(s, Accumulate) and s.index:
            self.index(s.index, bound, s.text)
            self.register_index(s.acc, s.index, loops, s.text)
        if isinstance(s, (FragmentLoad, MmaSync)):
            self.mma(s, bound, stages)
        if isinstance(s, WarpgroupMma):
            st = self.k.mma
            if st is None or not st.wgmma or (s.acc, s.n) != (st.acc, st.wgmma) or {s.a, s.b} - set(stages):
                self.fail("mma-fragments", f"{s.text()}: not the stamped wgmma of {s.acc} on stages in scope")
            self.index(s.a_at, dict(bound) | {"fr": 64, "fc": 16}, s.text)
            self.index(s.b_at, dict(bound) | {"fr": 16, "fc": s.n}, s.text)
        if isinstance(s, Combine) and s.acc not in values:
            self.fail("names-declared", f"{s.text()}: {s.acc} is no accumulator")
        if isinstance(s, AsyncWait):
            for name in s.stages:
                if name not in self.stage_names:
                    self.fail("tensors-known", f"{s.text()}: {name} is no stage of the kernel")
        if isinstance(s, (Load, Compute)):
            values.add(s.dst)

    def local_row(self, s):
        """local-rows: a local holds one row, the one its kernel's row (tile) axes index; its
        other dims are indexed by those axes alone, never by a loop walking the row."""
        local = next(b for b in self.k.locals if b.name == s.tensor)
        axes = {a.var for a in self.tile.axes} if self.tile is not None else set()
        for d, e in enumerate(s.index):
            if d in local.row_dims or local.type.shape[d] == 1:
                continue
            loose = free_vars(e) - axes
            if loose:
                self.fail("local-rows", f"{s.text()}: dim {d} of the local {s.tensor} is not its row's: "
                                        f"{', '.join(sorted(loose))} walk other rows than the one on chip")

    def mma(self, s, bound, stages):
        fm = getattr(self.k.flash, "mma", None)
        if fm is not None:            # flash on tensor cores: its two products (flash_mma_tile.py)
            if not flash_mma_operands(s, fm) or (isinstance(s, FragmentLoad) and s.stage not in stages):
                self.fail("mma-fragments", f"{s.text()}: not one of the flash kernel's products on stages in scope")
            if isinstance(s, FragmentLoad):
                self.index(s.at, dict(bound) | {"fr": 16, "fc": 8}, s.text)
            return
        st = self.k.mma
        if st is None:
            self.fail("mma-fragments", f"{s.text()}: the kernel has no MmaTile stamped")
        if isinstance(s, FragmentLoad):
            if s.dst != (st.a if s.operand == "A" else st.b) or s.stage not in stages:
                self.fail("mma-fragments", f"{s.text()}: not the stamped {s.operand} fragment of a stage in scope")
            rows, cols = st.shape.operand_shape(s.operand)
            self.index(s.at, dict(bound) | {"fr": rows, "fc": cols}, s.text)
            return
        if (s.acc, s.a, s.b, s.shape) != (st.acc, st.a, st.b, st.shape.name):
            self.fail("mma-fragments", f"{s.text()}: not the stamped {st.shape.name} of {st.acc}")
        for op in "ABC":
            try:
                st.layout(op).lane_of()
            except ValueError as e:
                self.fail("mma-fragments", str(e))

    def tma(self, s, bound):
        """A TMA stage carries the box its slab is (the lowering encodes the stamp without
        re-deriving it) in a swizzle the box allows; any other stage carries none."""
        if s.copy != "tma":
            if s.tma:
                self.fail("tma-stamp", f"stage {s.name} is copied by {s.copy} but stamped with {s.tma.text()}")
            return
        want, why = tensor_map_box(s, self.types[s.tensor].shape, self.types[s.tensor].dtype)
        if s.tma is None or want is None or (s.tma.box, s.tma.boxes) != (want.box, want.boxes):
            self.fail("tma-stamp", f"stage {s.name} is stamped with {s.tma.text() if s.tma else 'no box'}, but "
                                   f"its slab is {want.text() if want else 'no tensor-map box: ' + why}")
        allowed, why = swizzle_for(s.tma)
        if s.tma.swizzle and allowed != s.tma.swizzle:
            self.fail(
                "tma-stamp", f"stage {s.name}: {s.tma.text()}, but the box allows {allowed or 'no'} swizzle: {why}"
            )

    def unit(self, s, bound):
        """The stage's copy unit is the one the schedule's rule gives it here (a pass that
        changed the stage without restamping it would copy misaligned float4s, or lose them)."""
        want = copy_unit(s, self.types[s.tensor], bound, block_threads(self.tile) if self.tile else 0)
        if s.unit != want:
            self.fail("copy-unit", f"stage {s.name} is stamped to copy units of {s.unit} floats, but its rows, "
                                   f"pad and copy kind give {want}")

    # `where` (the statement's text, say) is a callable: the text is only made for a failure
    def reads(self, operands, values, where):
        for a in operands:
            if isinstance(a, str) and a not in values:
                self.fail("names-declared", f"{where()}: {a} is read before it is defined")

    def index(self, index, bound, where):
        for e in index:
            unbound = sorted(free_vars(e) - bound.keys())
            if unbound:
                self.fail("loop-vars-bound", f"{where()}: {', '.join(unbound)} is no tile axis or enclosing loop")
            for g in gathers(e):
                if g.tensor not in self.types:
                    self.fail("tensors-known", f"{where()}: gathers from {g.tensor}, which is no buffer")

    def width(self, s, loops):
        lane = loops[-1] if loops else None
        if s.width != VECTOR or not (isinstance(lane, Loop) and lane.kind == "vector" and lane.extent == VECTOR):
            self.fail("vector-width", f"{s.text()}: stamped {s.width} wide outside a vector loop of {VECTOR}")
        why = float4_reason(s.tensor, s.index, lane.var, self.types[s.tensor], self.multiples) \
            if s.tensor in self.types else f"{s.tensor} is not a global tensor"
        if why:
            self.fail("vector-width", f"stamped float4 but {why}")

    def shared(self, s, stages, loops):
        """A load's shared float4 stamp is the one its stage's layout gives it here (a pass
        that changed a stage without restamping its loads would read misaligned float4s)."""
        loop = loops[-1] if loops and isinstance(loops[-1], Loop) else None
        want = load_shared_width(s, stages[s.tensor], loop, self.multiples) if s.tensor in stages else 1
        if s.shared_width != want:
            self.fail("shared-width", f"{s.text()}: stamped to read {s.shared_width} floats of shared memory at "
                                      f"once, but its stage's slab, pad and buffers give {want}")

    def register_index(self, acc, index, loops, where):
        tile = self.k.register_tile(acc)
        if tile is None:
            self.fail("register-tiles", f"{where()}: {acc} is indexed but no register tile is stamped for it")
        if len(index) != len(tile.shape):
            self.fail("register-tiles", f"{where()}: {tile.text()} indexed with {len(index)} components")
        # a register loop, or an unrolled one (flash attention's dot product over q_reg)
        extents = {lp.var: lp.extent for lp in loops if isinstance(lp, Loop) and (lp.kind == "register" or lp.unroll)}
        for e, n in zip(index, tile.shape):
            # or the first slots of the tile once (flash's scattered scores: a lane's own keys)
            if not any(covers_once(e, extents, m) for m in range(n, 0, -1)):
                self.fail("register-tiles", f"{where()}: {e} is not a register loop of {n} ({tile.text()})")


def _tile_walk(body):
    for s in body:
        yield s
        if isinstance(s, (Tile, Loop, StridedLoop)):
            yield from _tile_walk(s.body)


# -- Kernel IR ---------------------------------------------------------------------------------



class _KernelChecker:
    def __init__(self, func: K.KernelFunc, limit: int, total_limit: int | None = None):
        self.f, self.limit, self.total_limit = func, limit, total_limit
        self.params = {p.name for p in func.params}
        stmts = list(K.walk_stmts(func.body))
        # shared arrays: declared, or pending a later pass's declaration (kernel_ir.StageCopy)
        self.shared = {s.name for s in stmts if isinstance(s, K.SharedArray)} | \
            {s.shared_array for s in stmts if getattr(s, "shared_array", None)}
        self.mbarriers = {s.name for s in stmts if isinstance(s, MbarrierInit)}

    def fail(self, invariant, detail):
        raise IRInvariantError("Kernel", invariant, self.f.name, detail)

    def run(self):
        # a buffer the kernel writes may read differently between threads (K.varies)
        self.body(self.f.body, set(), {p.name for p in self.f.params if not p.const}, divergent="")
        smem = declared_smem_bytes(self.f)
        if self.limit is not None and smem > self.limit:
            self.fail("static-smem", f"{smem} bytes of shared memory declared, more than {self.limit} per block")
        if self.total_limit is not None and smem + self.f.dynamic_smem > self.total_limit:
            self.fail("static-smem", f"{smem} bytes of static and {self.f.dynamic_smem} of dynamic shared memory, "
                                     f"more than {self.total_limit} per block")

    def body(self, body, scope, varying, divergent):
        for s in body:
            self.stmt(s, scope, varying, divergent)

    def stmt(self, s, scope, varying, divergent):
        for e in K.stmt_exprs(s):
            self.expr(e, scope)
        if isinstance(s, K.Declare):
            scope.add(s.name)
            if K.varies(s.init, varying):
                varying.add(s.name)
        elif isinstance(s, K.DeclareArray):
            scope.add(s.name)
        elif isinstance(s, AtomicInc):
            self.buffer(s.buffer)
            scope.add(s.dst)
            varying.add(s.dst)
        elif isinstance(s, Broadcast):     # block-uniform by construction
            self.array(s.array)
            scope.add(s.dst)
        elif isinstance(s, K.VectorLoad):
            scope.update(s.dsts)
            if s.space == "shared":
                self.array(s.source)
            else:
                self.buffer(s.source)
            varying.update(s.dsts)
        elif isinstance(s, K.Assign):
            if s.name not in scope:
                self.fail("names-declared", f"{s.name} is assigned before it is declared")
            if K.varies(s.value, varying) or K.varies(s.index, varying):
                varying.add(s.name)
        elif isinstance(s, K.GlobalStore):
            self.buffer(s.buffer)
        elif isinstance(s, K.SharedStore):
            self.array(s.array)
        elif isinstance(s, K.VectorStore):
            self.array(s.target) if s.space == "shared" else self.buffer(s.target)
        elif isinstance(s, (CpAsync, TmaLoad)):
            self.array(s.array)
            self.buffer(s.buffer)
            if isinstance(s, TmaLoad) and s.barrier not in self.mbarriers:
                self.fail("names-declared", f"TMA copy completes on {s.barrier}, which is never initialised")
        elif isinstance(s, TmaTensorLoad):
            self.array(s.array)
            if s.barrier not in self.mbarriers:
                self.fail("names-declared", f"TMA copy completes on {s.barrier}, which is never initialised")
            if s.tensor_map not in {t.name for t in self.f.tensor_maps}:
                self.fail("names-declared", f"TMA copy through {s.tensor_map}, which is no tensor map of the kernel")
        elif isinstance(s, (MbarrierWait, MbarrierArrive)) and s.name not in self.mbarriers:
            self.fail("names-declared", f"waits or arrives on mbarrier {s.name}, which is never initialised")
        elif isinstance(s, K.Barrier) and (divergent or getattr(self, "in_roles", 0)):
            divergent = divergent or "a warp-specialised role (the other role's warps skip it)"
            self.fail("uniform-barriers", f"a barrier inside {divergent}: threads that skip it hang the block")
        elif isinstance(s, K.If) and s.roles:    # whole warpgroups each side: elect.sync is fine there
            self.in_roles = getattr(self, "in_roles", 0) + 1
            self.body(s.then, set(scope), set(varying), divergent)
            self.body(s.orelse, set(scope), set(varying), divergent)
            self.in_roles -= 1
        elif isinstance(s, K.For):
            inner = set(scope) | {s.var}
            loop_varying = set(varying)
            uneven = any(K.varies(e, varying) for e in (s.start, s.stop, s.step))
            if uneven:
                loop_varying.add(s.var)
            self.body(s.body, inner, loop_varying,
                      divergent or (f"loop {s.var}, whose bounds differ between threads" if uneven else ""))
        elif isinstance(s, K.If):
            if s.elect and divergent:        # elect.sync needs the whole of warp 0
                self.fail("uniform-barriers", f"an elected issue (elect.sync in warp 0) inside {divergent}")
            branch = divergent or ("a branch on a thread-dependent condition" if K.varies(s.cond, varying) else "")
            self.body(s.then, set(scope), set(varying), branch)
            self.body(s.orelse, set(scope), set(varying), branch)

    def expr(self, e, scope):
        for x in K.subexprs(e):
            if isinstance(x, K.Var) and x.name not in scope:
                self.fail("names-declared", f"{x.name} is read before it is declared")
            elif isinstance(x, K.RegLoad) and x.array not in scope:
                self.fail("names-declared", f"register array {x.array} is read before it is declared")
            elif isinstance(x, K.SharedLoad):
                self.array(x.array)
            elif isinstance(x, K.GlobalLoad):
                self.buffer(x.buffer)

    def array(self, name):
        if name not in self.shared:
            self.fail("names-declared", f"shared array {name} is used but never declared")

    def buffer(self, name):
        if name not in self.params:
            self.fail("names-declared", f"global buffer {name} is no parameter of the kernel")


def check_repacks(kernel: TileKernel, earlier, program) -> None:
    """011's repacks (passes/repack/repack.py): each workspace declared in `program` with
    its shape, each repack kernel among the kernels launched before it (`earlier`)."""
    types = program.types() if kernel.repacks else {}
    for r in kernel.repacks:
        if r.workspace not in types or tuple(types[r.workspace].shape) != tuple(r.shape):
            raise IRInvariantError(
                "Tile", "repack", kernel.name, f"the workspace {r.workspace} {r.shape} is not declared"
            )
        if not any(e.name == r.kernel and e.repacks_for == kernel.name for e in earlier):
            raise IRInvariantError(
                "Tile", "repack", kernel.name, f"its repack kernel {r.kernel} does not run before it"
            )
