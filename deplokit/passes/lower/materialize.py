"""Tile IR → Kernel IR: spell a scheduled kernel in hardware primitives.

THREAD/BLOCK axes become threadIdx/blockIdx arithmetic; loads and stores become flat
global (or shared) accesses, masked where the rounding of an axis to whole blocks could
leave the tensor; the consecutive Stages of a body become one cooperative copy into
shared arrays (float4, cp.async or TMA bulk copies; double buffered and software pipelined
in a K loop: see deplokit.passes.lower.stage_copy) behind shared barriers; AsyncWait
becomes the wait for its stages' asynchronous copies (cp.async.wait_group, mbarrier wait)
and the barrier that makes them visible; Combine becomes
a warp-shuffle tree and, past one warp, one exchange of warp partials through shared memory
behind a single barrier. A barrier is emitted only where a hazard needs it: after a shared
array is filled, and before it is refilled in a loop (not for a double buffer).

Register tiles (008 register_tile): an accumulator written with an index becomes a
per-thread register array (DeclareArray, at the identity, before the first reduce loop that
folds into it; Accumulate -> Assign of one element; `load acc[..]` -> RegLoad), and every
register loop becomes a `#pragma unroll` For, so each element index is a compile-time
constant and the array stays in registers.

A vector loop (005 blockify_launch: 4 consecutive elements per thread) is unrolled into
per-lane registers with float4 loads and stores where alignment allows; see
deplokit.passes.lower.vector_access.

Split-K (003 split_matmul_k): AtomicAdd becomes an atomicAdd guarded like a store, and the
tensor it adds into is zeroed by a small kernel `<name>_zero` emitted just before the
kernel: the program itself zero-initialises the output, so it is correct on a GPU whatever
the output buffer held (the simulator's zero-filled outputs are not relied on).

Any Tile IR materialises, also before blockify: then the block may hold more threads than
a GPU allows, which only the simulator runs (check_passes)."""
from __future__ import annotations

from ...ir.kernel_names import unclash_locals
from ...ir import kernel_ir as K
from ...ir.index import Affine, FloorDiv, Gather, Mod, Var, bounds
from ...ir.kernel_ir import KernelFunc, KernelProgram, Param
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.tensor_ir import COMPARISON_OPS, REDUCTION_IDENTITY
from ...ir.tile_ir import (THREAD, AsyncWait, AtomicAdd, Combine, Stage, StridedLoop, Tile, TileKernel, TileProgram,
                           accumulators, walk)
from .local_rows import LocalRows
from .smem_layout import smem_offset

_COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}
_CTYPES = {"float32": "float", "int64": "int64", "int32": "int32", "bool": "bool"}


def materialize(program: TileProgram, ctx=None) -> KernelProgram:
    types = program.types()
    kernels: list[KernelFunc] = []
    names = {k.name for k in program.kernels}
    for k in program.kernels:
        for tensor in _atomic_targets(k):
            name = _unique(f"{k.name}_zero", names)
            names.add(name)
            kernels.append(_zero_kernel(name, tensor, types[tensor].numel))
        # a generated local may meet a tensor's name (an input called tid or acc0)
        kernels.append(unclash_locals(_Materializer(k, types).run()))
    return KernelProgram(program.buffers, program.written, tuple(kernels), program.outputs)


def _atomic_targets(kernel: TileKernel) -> list[str]:
    out: list[str] = []
    for s, _ in walk(kernel.body):
        if isinstance(s, AtomicAdd) and s.tensor not in out:
            out.append(s.tensor)
    return out


def _unique(name: str, taken) -> str:
    cand, n = name, 1
    while cand in taken:
        cand, n = f"{name}{n}", n + 1
    return cand


ZERO_BLOCK = 256


def _zero_kernel(name: str, tensor: str, numel: int) -> KernelFunc:
    """tensor[:] = 0, one element per thread: launched before a kernel that atomically adds
    partial sums into `tensor`."""
    threads = min(ZERO_BLOCK, numel)
    blocks = -(-numel // threads)
    i = K.Binary("+", K.Binary("*", K.Special("bid.x"), K.Const(threads, "int")), K.Special("tid.x")) \
        if blocks > 1 else K.Special("tid.x")
    store = K.GlobalStore(tensor, K.Var("i"), K.Const(0.0))
    body = [K.Declare("i", "int", i)]
    if blocks * threads != numel:
        store = K.If(K.Binary("<", K.Var("i"), K.Const(numel, "int")), (store,))
    body.append(store)
    return KernelFunc(name, (Param(tensor, "float", False, numel),), (blocks, 1, 1), (threads, 1, 1), tuple(body))


def affine_expr(e: Affine) -> K.Expr:
    out: K.Expr | None = None
    for atom, c in e.terms:
        term = _atom_expr(atom)
        if c != 1:
            term = K.Binary("*", term, K.Const(c, "int"))
        out = term if out is None else K.Binary("+", out, term)
    if out is None:
        return K.Const(e.const, "int")
    if e.const:
        out = K.Binary("+", out, K.Const(e.const, "int")) if e.const > 0 else \
            K.Binary("-", out, K.Const(-e.const, "int"))
    return out


def _atom_expr(atom) -> K.Expr:
    if isinstance(atom, Var):
        return K.Var(atom.name)
    if isinstance(atom, FloorDiv):
        return K.Binary("/", affine_expr(atom.expr), K.Const(atom.divisor, "int"))
    if isinstance(atom, Mod):
        return K.Binary("%", affine_expr(atom.expr), K.Const(atom.divisor, "int"))
    raise TypeError(atom)   # gathers are loaded into registers first (see _index_exprs)


class _Materializer:
    def __init__(self, kernel: TileKernel, types):
        self.kernel, self.types = kernel, types
        tiles = [s for s in kernel.body if isinstance(s, Tile)]
        self.tile = tiles[0] if tiles else Tile((), kernel.body)
        self.uniform = tuple(s for s in kernel.body if not isinstance(s, Tile)) if tiles else ()
        self.threads = 1
        for a in self.tile.axes:
            if a.kind == THREAD:
                self.threads *= a.extent
        self.ranges: dict[str, int] = {a.var: a.extent for a in self.tile.axes}
        self.stages: dict[str, Stage] = {}
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.loop_depth = 0
        self.accs: set[str] = set()
        self.reg_tiles: dict[str, tuple[int, ...]] = _register_tiles(self.tile.body)
        self.local_rows = LocalRows(kernel, self.tile, _flat, affine_expr)   # row fusion's on-chip rows
        self._n = 0

    def run(self) -> KernelFunc:
        body: list = []
        body += self._decompose("tid", K.Special("tid.x"), [a for a in self.tile.axes if a.kind == THREAD])
        body += self._decompose("bid", K.Special("bid.x"), [a for a in self.tile.axes if a.kind != THREAD])
        body += self.local_rows.declarations()
        body += self._stmts(self.uniform)
        body += self._stmts(self.tile.body)
        blocks = 1
        for a in self.tile.axes:
            if a.kind != THREAD:
                blocks *= a.extent
        params = []
        for name in self.reads + [w for w in self.writes if w not in self.reads]:
            t = self.types[name]
            params.append(Param(name, _CTYPES[t.dtype], name not in self.writes, t.numel))
        return KernelFunc(self.kernel.name, tuple(params), (blocks, 1, 1), (self.threads, 1, 1), tuple(body))

    # -- thread and block indices ------------------------------------------------------------
    def _decompose(self, flat_name, special, axes):
        if not axes:
            return []
        if len(axes) == 1:
            return [K.Declare(axes[0].var, "int", special)]
        out = [K.Declare(flat_name, "int", special)]
        stride = 1
        for a in reversed(axes):          # the last axis is the fastest
            e = K.Var(flat_name)
            if stride > 1:
                e = K.Binary("/", e, K.Const(stride, "int"))
            if a is not axes[0]:
                e = K.Binary("%", e, K.Const(a.extent, "int"))
            out.append(K.Declare(a.var, "int", e))
            stride *= a.extent
        return out

    # -- statements ----------------------------------------------------------------------------
    def _stmts(self, body) -> list:
        out: list = []
        local_barriers = self.local_rows.barriers(body)
        for i, s in enumerate(body):
            out += self._stage_copies.before(body, i)   # stage groups, AsyncWait; a K loop's prologue
            if local_barriers[i]:
                out.append(K.Barrier())                 # a local row written by the block is read
            out += self._stmt(s)
        return out

    def _stmt(self, s) -> list:
        if isinstance(s, Load):
            if s.tensor in self.reg_tiles:
                return [K.Declare(s.dst, "float", K.RegLoad(s.tensor, self._reg_index(s.tensor, s.index)))]
            return self._load(s)
        if isinstance(s, Compute):
            ctype = "bool" if s.op in COMPARISON_OPS else "float"
            if s.op == "where":
                a, b, c = (self._operand(x) for x in s.args)
                return [K.Declare(s.dst, "float", K.Select(a, b, c))]
            return [K.Declare(s.dst, ctype, K.Call(s.op, tuple(self._operand(a) for a in s.args)))]
        if isinstance(s, Accumulate):
            if s.index:
                idx = self._reg_index(s.acc, s.index)
                value = K.Call(_COMBINE[s.reduction], (K.RegLoad(s.acc, idx), self._operand(s.value)))
                return [K.Assign(s.acc, value, idx)]
            value = K.Call(_COMBINE[s.reduction], (K.Var(s.acc), self._operand(s.value)))
            return [K.Assign(s.acc, value)]
        if isinstance(s, AtomicAdd):
            return self._atomic_add(s)
        if isinstance(s, Store):
            return self._store(s)
        if isinstance(s, Loop) and s.kind == "vector":      # 4 elements per thread: float4 accesses
            from .vector_access import lower_vector_loop
            return lower_vector_loop(self, s)
        if isinstance(s, (Loop, StridedLoop)):
            return self._loop(s)
        if isinstance(s, Combine):
            return self._combine(s)
        if isinstance(s, Stage):
            return self._stage(s)
        if isinstance(s, AsyncWait):
            return self._async_wait(s)
        raise TypeError(f"cannot materialise {type(s).__name__}")

    def _loop(self, s) -> list:
        pre = []
        if s.kind == "reduce" and not self._in_reduce:
            # declared once, before the first reduce loop that folds into it (a K tail
            # loop goes on accumulating what the chunked loop started)
            for acc, red in accumulators(s.body):
                if acc not in self.accs:
                    self.accs.add(acc)
                    if acc in self.reg_tiles:
                        size = 1
                        for n in self.reg_tiles[acc]:
                            size *= n
                        pre.append(K.DeclareArray(acc, size, float(REDUCTION_IDENTITY[red])))
                    else:
                        pre.append(K.Declare(acc, "float", K.Const(REDUCTION_IDENTITY[red])))
        outer_reduce = self._in_reduce
        self._in_reduce = outer_reduce or s.kind == "reduce"
        self.loop_depth += 1
        if isinstance(s, Loop):
            self.ranges[s.var] = s.extent
            body = self._stmts(s.body)
            # a register loop is always unrolled: its variable indexes register arrays
            loop = K.For(s.var, K.Const(0, "int"), K.Const(s.extent, "int"), K.Const(1, "int"), tuple(body),
                         s.unroll or s.kind == "register")
        else:
            self.ranges[s.var] = s.stop
            body = self._stmts(s.body)
            loop = K.For(s.var, affine_expr(s.start), K.Const(s.stop, "int"), K.Const(s.step, "int"), tuple(body),
                         s.unroll)
        self.loop_depth -= 1
        self._in_reduce = outer_reduce
        return pre + [loop]

    _in_reduce = False

    def _reg_index(self, acc: str, index) -> K.Expr:
        """The flat (row-major) element of a register tile."""
        shape = self.reg_tiles[acc]
        if len(index) != len(shape):
            raise ValueError(f"{self.kernel.name}: register tile {acc} has {len(shape)} dimensions, "
                             f"indexed with {len(index)}")
        return _flat([affine_expr(e) for e in index], shape)

    def _operand(self, a) -> K.Expr:
        if isinstance(a, str):
            return K.Var(a)
        if isinstance(a, Affine):
            return affine_expr(a)
        return K.Const(float(a))

    # -- memory --------------------------------------------------------------------------------
    def _note_read(self, name):
        if name not in self.reads:
            self.reads.append(name)

    def _index_exprs(self, index, out: list) -> list[K.Expr]:
        """Index components as expressions; a gather's integer is loaded first into a register."""
        exprs = []
        for e in index:
            gathered = {}
            for atom, _ in e.terms:
                if isinstance(atom, Gather):
                    name = self._fresh("idx")
                    g_index = self._index_exprs(atom.index, out)
                    shape = self.types[atom.tensor].shape
                    self._note_read(atom.tensor)
                    _, safe = self._guard(atom.index, g_index, shape)   # threads past the end read a valid id
                    out.append(K.Declare(name, "int", K.GlobalLoad(atom.tensor, _flat(safe, shape), "int")))
                    gathered[atom] = name
            if gathered:
                e = Affine(tuple((Var(gathered[a]) if a in gathered else a, c) for a, c in e.terms), e.const)
            exprs.append(affine_expr(e))
        return exprs

    def _load(self, s: Load) -> list:
        if s.tensor in self.local_rows:
            return self.local_rows.load(s)
        if s.tensor in self.stages:
            stage = self.stages[s.tensor]
            offset = smem_offset([affine_expr(e) for e in s.index], stage)
            return [K.Declare(s.dst, "float", K.SharedLoad(stage.name, offset))]
        out: list = []
        shape = self.types[s.tensor].shape
        exprs = self._index_exprs(s.index, out)
        self._note_read(s.tensor)
        ctype = {"float32": "float", "bool": "bool"}.get(self.types[s.tensor].dtype, "int")
        cond, safe = self._guard(s.index, exprs, shape)
        value = K.GlobalLoad(s.tensor, _flat(safe, shape), ctype)
        if cond is not None:
            value = K.Select(cond, value, K.Const(float(s.pad or 0.0)) if ctype == "float" else K.Const(0, "int"))
        out.append(K.Declare(s.dst, "float" if ctype == "float" else ctype, value))
        return out

    def _guard(self, index, exprs, shape):
        """The in-bounds condition (None when provable) and clamped index expressions."""
        cond = None
        safe = []
        for e, ex, extent in zip(index, exprs, shape):
            b = bounds(e, self.ranges)
            lo_ok = b is not None and b[0] >= 0
            hi_ok = b is not None and b[1] < extent
            c = None
            if not lo_ok:
                c = K.Binary(">=", ex, K.Const(0, "int"))
            if not hi_ok:
                hi = K.Binary("<", ex, K.Const(extent, "int"))
                c = hi if c is None else K.Binary("&&", c, hi)
            if c is not None:
                cond = c if cond is None else K.Binary("&&", cond, c)
                if not lo_ok:
                    ex = K.Binary("max", ex, K.Const(0, "int"))
                if not hi_ok:
                    ex = K.Binary("min", ex, K.Const(extent - 1, "int"))
            safe.append(ex)
        return cond, safe

    def _store(self, s: Store) -> list:
        if s.tensor in self.local_rows:
            return self.local_rows.store(s, self._operand(s.value))
        return self._write(s, K.GlobalStore)

    def _atomic_add(self, s: AtomicAdd) -> list:
        return self._write(s, K.AtomicAdd)

    def _write(self, s, make) -> list:
        """A store (or atomic add) to a global tensor, masked where its index can leave it."""
        out: list = []
        shape = self.types[s.tensor].shape
        exprs = self._index_exprs(s.index, out)
        if s.tensor not in self.writes:
            self.writes.append(s.tensor)
        cond, _ = self._guard(s.index, exprs, shape)
        write = make(s.tensor, _flat(exprs, shape), self._operand(s.value))
        out.append(write if cond is None else K.If(cond, (write,)))
        return out

    def _stage(self, s: Stage) -> list:
        """A Stage: a cooperative copy into a __shared__ array (sync with float4 where the rows
        allow, cp.async, or TMA bulk copies), double buffered and pipelined in a K loop as the
        Tile IR says; see deplokit.passes.lower.stage_copy."""
        return self._stage_copies.stage(s)

    def _async_wait(self, s: AsyncWait) -> list:
        """The point where the stages' asynchronous copies have landed and are visible to every
        thread (emitted by the stage copier's `before`, which sees the statements around it)."""
        return self._stage_copies.async_wait(s)

    @property
    def _stage_copies(self):
        from .stage_copy import StageCopier
        if "_copier" not in self.__dict__:
            self._copier = StageCopier(self)
        return self._copier

    def _declared(self, name):
        d = getattr(self, "_smem", set())
        self._smem = d | {name}
        return name in d

    def _combine(self, s: Combine) -> list:
        """Shuffle-xor tree within each warp, then (past one warp) one exchange of the warp
        partials through shared memory. The lane axis is the fastest THREAD axis, so the
        threads of one row group are consecutive: group = tid / E, warp in group = lane / 32."""
        (axis_var,) = s.over
        thread_axes = [a for a in self.tile.axes if a.kind == THREAD]
        if thread_axes[-1].var != axis_var:
            raise ValueError(f"{self.kernel.name}: Combine over {axis_var}, which is not the fastest THREAD axis")
        extent = thread_axes[-1].extent
        op = _COMBINE[s.reduction]
        out: list = []
        off = min(16, extent // 2)
        while off >= 1:
            out.append(K.Assign(s.acc, K.Call(op, (K.Var(s.acc), K.Shuffle(K.Var(s.acc), off)))))
            off //= 2
        if extent > 32:
            warps = extent // 32
            groups = self.threads // extent
            arr = f"{s.acc}_smem"
            lane = K.Binary("&", K.Var(axis_var), K.Const(31, "int"))
            base = K.Const(0, "int") if groups == 1 else \
                K.Binary("*", K.Binary("/", K.Special("tid.x"), K.Const(extent, "int")), K.Const(warps, "int"))
            slot = K.Binary("/", K.Var(axis_var), K.Const(32, "int"))
            if groups > 1:
                slot = K.Binary("+", base, slot)
            out += [K.SharedArray(arr, warps * groups),
                    K.If(K.Binary("==", lane, K.Const(0, "int")), (K.SharedStore(arr, slot, K.Var(s.acc)),)),
                    K.Barrier(),
                    K.Assign(s.acc, K.SharedLoad(arr, base))]
            w = f"{s.acc}_w"
            at = K.Var(w) if groups == 1 else K.Binary("+", base, K.Var(w))
            out.append(K.For(w, K.Const(1, "int"), K.Const(warps, "int"), K.Const(1, "int"),
                             (K.Assign(s.acc, K.Call(op, (K.Var(s.acc), K.SharedLoad(arr, at)))),), True))
        return out

    def _fresh(self, prefix):
        self._n += 1
        return f"{prefix}{self._n}"


def _flat(exprs, shape) -> K.Expr:
    out = None
    stride = 1
    for e, extent in reversed(list(zip(exprs, shape))):
        term = e if stride == 1 else K.Binary("*", e, K.Const(stride, "int"))
        if not (isinstance(e, K.Const) and e.value == 0):
            out = term if out is None else K.Binary("+", term, out)
        stride *= extent
    return out if out is not None else K.Const(0, "int")


def _register_tiles(body) -> dict[str, tuple[int, ...]]:
    """Accumulator -> register-tile shape: the extents of the register loops its indexed
    Accumulate runs in, in the order of its index."""
    out: dict[str, tuple[int, ...]] = {}
    for s, loops in walk(body):
        if isinstance(s, Accumulate) and s.index:
            extents = {lp.var: lp.extent for lp in loops if isinstance(lp, Loop) and lp.kind == "register"}
            shape = []
            for e in s.index:
                names = [a.name for a, _ in e.terms if isinstance(a, Var)]
                if len(names) != 1 or names[0] not in extents:
                    raise ValueError(f"register tile {s.acc} indexed by {e}: not a register loop variable")
                shape.append(extents[names[0]])
            if out.setdefault(s.acc, tuple(shape)) != tuple(shape):
                raise ValueError(f"register tile {s.acc} used with shapes {out[s.acc]} and {tuple(shape)}")
    return out
