"""Vector loop -> Kernel IR: 4 consecutive elements per thread, moved with float4.

A vector loop (`for a1v in 0..4:  # vector`, see 005 blockify_launch) is unrolled in
registers: a value that depends on the lane gets one register per lane (`in0_x .. in0_w`,
after float4's components), a value that does not is computed once, and an accumulate
folds the 4 lanes' values in order. Each global load or store 005 stamped 4 wide
(`# float4`: its 4 elements are one aligned float4, deplokit.passes.vector_geometry; the IR
verifier checks the stamp still holds) becomes a VectorLoad / VectorStore; a load from a
staged slab stamped 4 wide in shared memory (Load.shared_width: the slab's rows keep the 4
floats 16-byte aligned, stamped with the stage's copy by stage_geometry.restamp_stages)
becomes a shared VectorLoad; any other access is spelled lane by lane. Nothing here
decides a width: the lowering reads the stamps.

Bounds: the last extent and the first lane's offset are multiples of 4, so the 4 elements
are wholly inside or wholly outside the tensor and one guard, on the first, covers them
(clamping to extent - 4 keeps a masked run's address aligned).

    for a1v in 0..4:  # vector                    in0_x, in0_y, in0_z, in0_w = global float4 x0[..]
        in0 = load x0[a0, a1t * 4 + a1v]     ->   v0_x = multiply(in0_x, 2) ... v0_w = ...
        v0 = multiply(in0, 2)                     global float4 out[..] = (v0_x, v0_y, v0_z, v0_w)
        out[a0, a1t * 4 + a1v] = v0
"""
from __future__ import annotations

from ...ir import kernel_ir as K
from ...ir.index import Affine, const, free_vars, substitute
from ...ir.kernel_expr import affine_expr, flat_offset
from ...ir.lanes import row_major_offset, varies
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.smem_layout import smem_offset
from ...target import VECTOR

LANE_NAMES = "xyzw"


def lower_vector_loop(m, loop: Loop) -> list:
    """Kernel IR for vector loop `loop` inside materialiser `m` (a k001_materialize.Materializer:
    its `stmt`, `loop`, `ranges`, `stages`, `vector_multiples` and index helpers)."""
    if loop.extent != VECTOR or not all(isinstance(s, (Load, Compute, Store)) or
                                        (isinstance(s, Accumulate) and not s.index) for s in loop.body):
        # not a float4 body: an ordinary unrolled loop keeps the meaning
        return m.loop(Loop(loop.var, loop.extent, "free", loop.body, loop.role, True))
    return _VectorLowering(m, loop).run()


class _VectorLowering:
    def __init__(self, m, loop: Loop):
        self.m, self.loop, self.lane = m, loop, loop.var
        self.varying: set[str] = set()
        self.multiples = m.vector_multiples

    def run(self) -> list:
        m = self.m
        m.ranges[self.lane] = VECTOR
        out: list = []
        for s in self.loop.body:
            if isinstance(s, Load):
                out += self._load(s)
            elif isinstance(s, Compute):
                out += self._compute(s)
            elif isinstance(s, Accumulate):  # the 4 values folded in in order, as the loop would
                out += self._per_lane(
                    lambda i, s=s: Accumulate(s.acc, s.reduction, self._operand(s.value, i), dtype=s.dtype)
                )
            else:
                out += self._store(s)
        return out

    # -- lanes ------------------------------------------------------------------------------
    def _name(self, name: str, i: int) -> str:
        return f"{name}_{LANE_NAMES[i]}"

    def _at(self, e: Affine, i: int) -> Affine:
        return substitute(e, {self.lane: const(i)}, self.m.ranges)

    def _operand(self, a, i: int):
        if isinstance(a, str) and a in self.varying:
            return self._name(a, i)
        if isinstance(a, Affine) and self.lane in free_vars(a):
            return self._at(a, i)
        return a

    def _varies(self, a) -> bool:
        return (isinstance(a, str) and a in self.varying) or (isinstance(a, Affine) and self.lane in free_vars(a))

    def _per_lane(self, make) -> list:
        out: list = []
        for i in range(VECTOR):
            out += self.m.stmt(make(i))
        return out

    # -- statements -------------------------------------------------------------------------
    def _compute(self, s: Compute) -> list:
        if not any(self._varies(a) for a in s.args):
            return self.m.stmt(s)
        self.varying.add(s.dst)
        return self._per_lane(lambda i: Compute(self._name(s.dst, i), s.op,
                                                tuple(self._operand(a, i) for a in s.args), s.note, s.dtype))

    def _load(self, s: Load) -> list:
        if not varies(s.index, self.lane):
            return self.m.stmt(s)
        self.varying.add(s.dst)
        dsts = tuple(self._name(s.dst, i) for i in range(VECTOR))
        if s.tensor in self.m.stages:
            vec = self._shared_load(s, dsts)
        elif s.width == VECTOR:             # 005's decision: one aligned float4
            vec = self._global_load(s, dsts)
        else:
            vec = None
        if vec is not None:
            return vec
        return self._per_lane(lambda i: Load(dsts[i], s.tensor, tuple(self._at(e, i) for e in s.index), s.pad))

    def _global_load(self, s: Load, dsts) -> list:
        m = self.m
        out: list = []
        shape = m.types[s.tensor].shape
        index0 = tuple(self._at(e, 0) for e in s.index)
        with _aligned_ranges(m, self.multiples):
            exprs = m.index_exprs(index0, out)
            along_last = not any(varies((e,), self.lane) for e in s.index[:-1])
            cond, offset = self._guard(index0, exprs, shape, along_last)
        m.note_read(s.tensor)
        out.append(K.VectorLoad(dsts, "global", s.tensor, offset))
        if cond is not None:           # a masked run reads an aligned, clamped run, then the pad
            pad = K.Const(float(s.pad or 0.0))
            out += [K.Assign(d, K.Select(cond, K.Var(d), pad)) for d in dsts]
        return out

    def _shared_load(self, s: Load, dsts) -> list | None:
        """One float4 from the staged slab where the schedule stamped the load so (its rows
        keep the 4 floats 16-byte aligned: Load.shared_width, the verifier checks it)."""
        if s.shared_width != VECTOR:
            return None
        stage = self.m.stages[s.tensor]
        offset = smem_offset([affine_expr(self._at(e, 0)) for e in s.index], stage)
        return [K.VectorLoad(dsts, "shared", stage.name, offset)]

    def _guard(self, index0, exprs, shape, along_last: bool = True):
        """The in-bounds condition of a run of 4 (None when provable) and the flat offset of
        its clamped first element. A clamp must keep the run aligned and inside. Along the
        last dimension the first element and the extent are multiples of 4, so `first <
        extent` holds for all 4 elements when it holds for one and the clamp goes to extent
        - 4, not extent - 1. A run that moves along another dimension (x[e, k, 0] of an
        (8, 1000, 1) tensor, x[j // 12289, j % 12289]) was judged by 005 on the flat offset
        (vector_geometry.float4_reason), so the flat offset is clamped, to numel - 4 (a
        multiple of 4): a per-dimension clamp would move the run off its 16 bytes."""
        cond, _ = self.m.guard(index0, exprs, shape)
        if cond is None:
            return None, flat_offset(exprs, shape)
        if along_last:
            _, safe = self.m.guard(index0, exprs, _first_of_four(shape))
            return cond, flat_offset(safe, shape)
        numel = 1
        for n in shape:
            numel *= n
        _, (safe,) = self.m.guard((row_major_offset(index0, shape),), (flat_offset(exprs, shape),),
                                  (numel - (VECTOR - 1),))
        return cond, safe

    def _store(self, s: Store) -> list:
        m = self.m
        values = [self._operand(s.value, i) for i in range(VECTOR)]
        if s.width != VECTOR or not varies(s.index, self.lane):   # lane by lane, in order (the last lane's store wins)
            return self._per_lane(lambda i: Store(s.tensor, tuple(self._at(e, i) for e in s.index), values[i]))
        out: list = []
        shape = m.types[s.tensor].shape
        index0 = tuple(self._at(e, 0) for e in s.index)
        with _aligned_ranges(m, self.multiples):
            exprs = m.index_exprs(index0, out)
            cond, _ = self._guard(index0, exprs, shape)
        m.note_write(s.tensor)
        store = K.VectorStore("global", s.tensor, flat_offset(exprs, shape), tuple(m.operand(v) for v in values))
        out.append(store if cond is None else K.If(cond, (store,)))
        return out


def _first_of_four(shape) -> tuple[int, ...]:
    """The shape the first of 4 aligned elements must lie in for all 4 to lie in `shape`."""
    return tuple(shape[:-1]) + (shape[-1] - (VECTOR - 1),)


class _aligned_ranges:
    """While bounds are proved: a variable that takes only multiples of 4 below a stop that
    is one reaches stop - 4 at most (its range shrinks by 3)."""

    def __init__(self, m, multiples):
        self.m, self.multiples, self.saved = m, multiples, {}

    def __enter__(self):
        for v in self.multiples:
            n = self.m.ranges.get(v)
            if n is not None and n % VECTOR == 0:
                self.saved[v] = n
                self.m.ranges[v] = n - (VECTOR - 1)

    def __exit__(self, *exc):
        self.m.ranges.update(self.saved)
        return False
