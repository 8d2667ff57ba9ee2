"""A kernel's locals (row fusion) in Kernel IR: shared arrays, and the barriers they need.

A local (LocalBuffer) is read and written with its full logical index. Its shared array
holds the dims of one row (`row_dims`) plus the dims a THREAD axis indexes (before 004
cooperative_reduce every thread owns a row); a dim indexed by a BLOCK axis, a serial loop
or a constant is dropped: each block (or each iteration of a serial row loop, in one
thread) holds only its own row.

The threads of a block write a row in one phase and read it in later ones (attention:
scores, then max and sum, then probabilities, then P @ V), so a barrier goes between a
statement that writes a local and the first later statement of the same body that reads
it. Phases are statements of the Tile's body, which every thread of the block executes,
so the barrier is never in divergent code."""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import Var
from ...ir.loop_ir import Load, Store
from ...ir.tile_ir import THREAD, StridedLoop, walk
from ...ir.types import shared_ctype


class LocalRows:
    def __init__(self, kernel, tile, flat, affine_expr):
        self.locals = {b.name: b for b in kernel.locals}
        self._flat, self._affine = flat, affine_expr
        threads = {a.var for a in tile.axes if a.kind == THREAD}
        lanes = sorted({str(s.start) for s, _ in walk(tile.body) if isinstance(s, StridedLoop)} & threads)
        self.dims: dict[str, tuple[int, ...]] = {}      # local -> dims its shared array keeps
        self.by_lane0: set[int] = set()                 # stores every lane of a row would repeat
        for s, loops in walk(tile.body):
            if isinstance(s, (Load, Store)) and s.tensor in self.locals and s.tensor not in self.dims:
                b = self.locals[s.tensor]
                self.dims[s.tensor] = tuple(d for d, e in enumerate(s.index)
                                            if d in b.row_dims or _thread_var(e, threads))
            if isinstance(s, Store) and s.tensor in self.locals and lanes and \
                    not any(isinstance(lp, StridedLoop) for lp in loops):
                self.by_lane0.add(id(s))
        self._lane0 = None
        for lane in lanes:
            c = K.Binary("==", K.Var(lane), K.Const(0, "int"))
            self._lane0 = c if self._lane0 is None else K.Binary("&&", self._lane0, c)

    def __contains__(self, tensor: str) -> bool:
        return tensor in self.locals

    def array(self, tensor: str) -> str:
        return f"{tensor}_smem"

    def declarations(self) -> list:
        return [K.SharedArray(self.array(t), max(1, self._size(t)), ctype=shared_ctype(self.locals[t].type.dtype))
                for t in self.dims]

    def _size(self, tensor) -> int:
        n = 1
        for d in self.dims[tensor]:
            n *= self.locals[tensor].type.shape[d]
        return n

    def _offset(self, tensor, index) -> K.Expr:
        shape = self.locals[tensor].type.shape
        kept = self.dims[tensor]
        return self._flat([self._affine(index[d]) for d in kept], [shape[d] for d in kept])

    def load(self, s: Load) -> list:
        ctype = shared_ctype(self.locals[s.tensor].type.dtype)
        return [K.Declare(s.dst, ctype, K.SharedLoad(self.array(s.tensor), self._offset(s.tensor, s.index)))]

    def store(self, s: Store, value: K.Expr) -> list:
        """A store outside the lanes' strided loops: every lane holds the same value (a row of
        one element); lane 0 writes it (two threads storing to one shared element race)."""
        store = K.SharedStore(self.array(s.tensor), self._offset(s.tensor, s.index), value)
        return [K.If(self._lane0, (store,)) if id(s) in self.by_lane0 else store]

    def barriers(self, body) -> list[bool]:
        """For each statement of `body`: whether a barrier must come before it (it reads a
        local that an earlier statement of the body wrote since the last barrier)."""
        out, dirty = [], set()
        for s in body:
            reads, writes = self._accesses(s)
            need = bool(reads & dirty)
            if need:
                dirty = set()
            out.append(need)
            dirty |= writes
        return out

    def _accesses(self, s) -> tuple[set, set]:
        reads, writes = set(), set()
        for x, _ in walk((s,)):
            if isinstance(x, Load) and x.tensor in self.locals:
                reads.add(x.tensor)
            elif isinstance(x, Store) and x.tensor in self.locals:
                writes.add(x.tensor)
        return reads, writes


def _thread_var(e, threads) -> bool:
    return len(e.terms) == 1 and isinstance(e.terms[0][0], Var) and e.terms[0][0].name in threads
