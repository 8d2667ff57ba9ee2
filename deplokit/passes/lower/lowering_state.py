"""What the lowering of one Tile-IR kernel knows while it walks the kernel: the tensors'
types, the variables in scope and their ranges, the stages placed in shared memory, the
tensors read and written (the kernel's parameters), the shared arrays declared so far.

The statement walker (k001_materialize.Materializer) extends this; the helpers that spell
one construct (stage copies, vector loops, Combine, local rows) read and update it through
these public fields and methods only."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import Affine, FloorDiv, Gather, Mod, Var, gathers
from ...ir.kernel_expr import affine_expr, flat_offset, guard
from ...ir.kernel_ir import Param
from ...ir.loop_ir import Accumulate, Compute, Load
from ...ir.tile_ir import THREAD, Stage, Tile, TileKernel, walk
from ...ir.types import DTYPE_CTYPE, TensorType, value_dtype
from ...ir.value_expr import constant
from .index_width import index_bits


class LoweringState:
    def __init__(self, kernel: TileKernel, types: dict[str, TensorType]):
        self.kernel, self.types = kernel, types
        tiles = [s for s in kernel.body if isinstance(s, Tile)]
        self.tile = tiles[0] if tiles else Tile((), kernel.body)
        self.uniform = tuple(s for s in kernel.body if not isinstance(s, Tile)) if tiles else ()
        self.thread_axes = tuple(a for a in self.tile.axes if a.kind == THREAD)
        self.block_axes = tuple(a for a in self.tile.axes if a.kind != THREAD)
        self.threads = _product(a.extent for a in self.thread_axes)
        self.blocks = _product(a.extent for a in self.block_axes)
        self.ranges: dict[str, int] = {a.var: a.extent for a in self.tile.axes}   # variables in scope
        self.stages: dict[str, Stage] = {}        # stage name -> the stage as placed (smem_layout.PlacedStage)
        self.reads: list[str] = []                # global tensors read, in order
        self.writes: list[str] = []               # global tensors written, in order
        self.loop_depth = 0                       # loops enclosing the statement being lowered
        self.shared: set[str] = set()             # shared arrays declared so far
        self.quad_picks: dict[str, K.Expr] = {}   # a load's value: its component of a shared float4
        self._names = 0
        self.dtypes = _value_dtypes(kernel, types)    # Loop-IR value -> its dtype
        # 64 where an offset may pass 2**31 - 1: the kernel's "int"s are then long long
        self.index_bits = index_bits(kernel, types, self.threads * self.blocks)

    # -- the kernel's parameters ---------------------------------------------------------------
    def note_read(self, tensor: str) -> None:
        if tensor not in self.reads:
            self.reads.append(tensor)

    def note_write(self, tensor: str) -> None:
        if tensor not in self.writes:
            self.writes.append(tensor)

    def params(self) -> tuple[Param, ...]:
        out = []
        for name in self.reads + [w for w in self.writes if w not in self.reads]:
            t = self.types[name]
            out.append(Param(name, DTYPE_CTYPE[t.dtype], name not in self.writes, t.numel))
        return tuple(out)

    # -- names -------------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def declare_shared(self, name: str) -> bool:
        """Record the shared array `name`; True the first time (its SharedArray is due)."""
        first = name not in self.shared
        self.shared.add(name)
        return first

    # -- indices -----------------------------------------------------------------------------------
    def index_exprs(self, index, out: list) -> list[K.Expr]:
        """Index components as expressions; a gather's integer is loaded first into a
        register (its Declare appended to `out`), also one inside a // or % (x.flatten()[ids])."""
        return [affine_expr(self._gathers_loaded(e, out, {})) for e in index]

    def gathers_loaded(self, e: Affine, out: list, loaded: dict) -> Affine:
        """e with each gather's integer loaded into a register (Declares appended to `out`,
        `loaded` maps each Gather to its register's Var)."""
        return self._gathers_loaded(e, out, loaded)

    def _gathers_loaded(self, e: Affine, out: list, loaded: dict) -> Affine:
        if not gathers(e):
            return e
        terms = []
        for atom, c in e.terms:
            if isinstance(atom, Gather):
                if atom not in loaded:
                    name = self.fresh("idx")
                    g_index = self.index_exprs(atom.index, out)
                    shape = self.types[atom.tensor].shape
                    self.note_read(atom.tensor)
                    _, safe = self.guard(atom.index, g_index, shape)   # threads past the end read a valid id
                    out.append(K.Declare(name, "int", K.GlobalLoad(atom.tensor, flat_offset(safe, shape), "int")))
                    loaded[atom] = Var(name)
                atom = loaded[atom]
            elif isinstance(atom, (FloorDiv, Mod)):
                atom = type(atom)(self._gathers_loaded(atom.expr, out, loaded), atom.divisor)
            terms.append((atom, c))
        return Affine(tuple(terms), e.const)

    def guard(self, index, exprs, shape):
        """The in-bounds condition (None when provable in the current ranges) and clamped
        index expressions (kernel_expr.guard)."""
        return guard(index, exprs, shape, self.ranges)

    def operand(self, a) -> K.Expr:
        return self.typed_operand(a)[0]

    def typed_operand(self, a) -> tuple[K.Expr, str | None]:
        """(expression, dtype) of a Loop-IR operand; a constant's dtype is None (it takes the
        type of the computation it is in), an index value's is the index width's."""
        if isinstance(a, str):
            if a in self.quad_picks:          # a component of a shared float4 (register_quads.py)
                return self.quad_picks[a], self.dtypes.get(a, "float32")
            return K.Var(a), self.dtypes.get(a, "float32")
        if isinstance(a, Affine):
            return affine_expr(a), "int32" if self.index_bits == 32 else "int64"
        if isinstance(a, bool):
            return K.Const(a, "bool"), None
        if isinstance(a, int):
            return K.Const(a, "int64"), None
        return K.Const(float(a)), None

    def value_as(self, a, dtype: str) -> K.Expr:
        """Operand `a` converted to `dtype` (a store into a tensor of that dtype)."""
        e, have = self.typed_operand(a)
        if have is None:
            return constant(e.value, dtype)
        return e if have == dtype else K.Cast(DTYPE_CTYPE[dtype], e)

    def register_index(self, acc: str, index) -> K.Expr:
        """The flat (row-major) element of register tile `acc` (its shape stamped by 008)."""
        tile = self.kernel.register_tile(acc)
        if tile is None or len(index) != len(tile.shape):
            dims = "no register tile" if tile is None else f"a register tile of {len(tile.shape)} dimensions"
            raise ValueError(f"{self.kernel.name}: {acc} is {dims}, indexed with {len(index)}")
        return flat_offset([affine_expr(e) for e in index], tile.shape)


def _value_dtypes(kernel: TileKernel, types) -> dict[str, str]:
    """The dtype of every value the kernel's statements define (names are unique in a kernel)."""
    local = {b.name: b.type for b in kernel.locals}
    out: dict[str, str] = {}
    for s, _ in walk(kernel.body):
        if isinstance(s, Load):
            t = types.get(s.tensor) or local.get(s.tensor)
            out[s.dst] = value_dtype(t.dtype) if t is not None else "float32"
        elif isinstance(s, Compute):
            out[s.dst] = s.dtype
        elif isinstance(s, Accumulate):
            out[s.acc] = s.dtype
    return out


def _product(extents) -> int:
    n = 1
    for e in extents:
        n *= e
    return n
