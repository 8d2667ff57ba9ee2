"""Numpy interpreter for Loop IR, vectorised over loops.

A loop variable is an arange laid along its own axis (the loop's depth), so one numpy
operation runs a statement for every iteration at once; a reduce loop's accumulate sums
(or maxes) along its axes. Loops whose iteration space would be too large to hold at once
run in chunks, and an accumulator folds the chunks together."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.index import Affine, Var, evaluate, gathers
from ..ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, LoopProgram, Store, walk
from .numpy_ops import NP_DTYPES, REDUCE, apply
from .rounding import round_array

# Largest number of elements a vectorised statement may span before loops are chunked.
MAX_ELEMENTS = 1 << 22



def run_loop_ir(program: LoopProgram, env: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    buffers = dict(env)
    types = program.types()
    alias = {b.name: b.alias for b in program.written if b.alias}
    dtypes = {name: t.dtype for name, t in types.items()}     # once, not once a kernel
    for k in program.kernels:
        for out in k.outputs:
            t = types[out]
            # an in-place write into state: the state's array itself, changed where stored
            buffers[out] = buffers[alias[out]] if out in alias else np.zeros(t.shape, dtype=NP_DTYPES[t.dtype])
        for b in k.locals:     # on chip a row at a time; here whole, as the loops are vectorised
            buffers[b.name] = np.zeros(b.type.shape, dtype=NP_DTYPES[b.type.dtype])
        run_kernel(k, buffers, dtypes)
    return [buffers[o] for o in program.outputs]


def run_kernel(kernel: Kernel, buffers: dict, dtypes: Mapping[str, str] | None = None) -> None:
    """`dtypes`: buffer -> dtype, so that a store to a half buffer rounds (to nearest even)."""
    depth = _max_depth(kernel.body)
    runner = _Runner(buffers, max(depth, 1), dtypes or {})
    # what the kernel stores (an in-place state write: the state's own array): a load from it
    # is a copy, never a view that a later store would change under it
    runner.written = [buffers[s.tensor] for s, _ in walk(kernel.body) if isinstance(s, Store)]
    runner.body(kernel.body, {}, (), 1)


def _max_depth(body) -> int:
    return max((1 + _max_depth(s.body) for s in body if isinstance(s, Loop)), default=0)


def _volume(loop: Loop) -> int:
    inner = max((_volume(s) for s in loop.body if isinstance(s, Loop)), default=1)
    return loop.extent * inner


class _Runner:
    def __init__(self, buffers, ndim, dtypes):
        self.buffers, self.ndim, self.dtypes = buffers, ndim, dtypes
        self.accs: dict[str, np.ndarray] = {}
        self.written: list[np.ndarray] = []
        self._extent: dict[int, int] = {}     # axis -> size of the chunk bound there now

    def body(self, stmts, ctx, reduce_axes, size):
        """ctx: names -> arrays (loop vars and values); reduce_axes: axes of the enclosing
        reduce loops of the current phase; size: elements the enclosing chunks span."""
        for s in stmts:
            if isinstance(s, Load):
                ctx[s.dst] = self.load(s, ctx)
            elif isinstance(s, Compute):
                ctx[s.dst] = apply(s.op, [self.operand(a, ctx) for a in s.args], s.dtype)
            elif isinstance(s, Accumulate):
                self.accumulate(s, ctx, reduce_axes)
            elif isinstance(s, Store):
                self.store(s, ctx)
            else:
                self.loop(s, ctx, reduce_axes, size)

    def operand(self, a, ctx):
        if isinstance(a, str):
            return ctx[a] if a in ctx else self.accs[a]
        if isinstance(a, Affine):
            return evaluate(a, ctx, self.buffers)
        return a

    def load(self, s: Load, ctx):
        src = self.buffers[s.tensor]
        if s.pad is None and not any(np.may_share_memory(src, w) for w in self.written):
            tile = _sliced(src, s.index, ctx, self.ndim)
            if tile is not None:
                return tile
        idx = [evaluate(e, ctx, self.buffers) for e in s.index]
        if s.pad is None and not any(gathers(e) for e in s.index):
            return src[tuple(np.asarray(i) for i in idx)] if idx else src[()]
        ok = np.ones((), dtype=bool)
        for i, extent in zip(idx, src.shape):
            ok = ok & (i >= 0) & (i < extent)
        clipped = tuple(np.clip(i, 0, extent - 1) for i, extent in zip(idx, src.shape))
        # a data-dependent row outside the table reads the pad (0 without one), as the CUDA does
        return np.where(ok, src[clipped], np.asarray(s.pad or 0, dtype=src.dtype))

    def store(self, s: Store, ctx):
        dst = self.buffers[s.tensor]
        value = round_array(self.operand(s.value, ctx), self.dtypes.get(s.tensor))
        idx = [np.asarray(evaluate(e, ctx, self.buffers)) for e in s.index]
        if not idx:   # a 0-d tensor: the value is one element, held as (1,) * depth
            dst[()] = np.asarray(value).reshape(())
            return
        arrays = np.broadcast_arrays(*(idx + [np.asarray(value)]))
        dst[tuple(arrays[:-1])] = arrays[-1]

    def accumulate(self, s: Accumulate, ctx, reduce_axes):
        value = np.asarray(self.operand(s.value, ctx))
        shape = [1] * self.ndim
        if value.ndim:
            shape = list(np.broadcast_shapes(value.shape, tuple(shape)))
        for ax in reduce_axes:   # a value that does not vary along a reduce axis still counts
            shape[ax] = self._extent[ax]
        value = np.broadcast_to(value.reshape(value.shape if value.ndim else (1,) * self.ndim), shape)
        partial = REDUCE[s.reduction](value, axis=tuple(reduce_axes), keepdims=True)
        prev = self.accs[s.acc]
        if prev is None:
            self.accs[s.acc] = partial
            return
        self.accs[s.acc] = apply({"sum": "add", "max": "maximum", "min": "minimum"}[s.reduction], [prev, partial])

    def loop(self, s: Loop, ctx, reduce_axes, size):
        axis = ctx.get(_DEPTH, 0)
        if s.kind == "reduce" and not reduce_axes:   # a phase starts: its accumulators reset
            for acc, red in _accumulators(s):   # None: the first partial is taken as it is,
                self.accs[acc] = None               # so an integer sum or max stays exact
        per_iter = max(1, size * _volume(s) // s.extent)
        chunk = max(1, min(s.extent, MAX_ELEMENTS // per_iter))
        if s.kind == "serial":   # each iteration reads what the previous one stored
            chunk = 1
        axes = reduce_axes + (axis,) if s.kind == "reduce" else reduce_axes
        extent = s.extent
        if s.stop is not None:      # a runtime bound: up to the furthest any row runs
            extent = min(extent, max(0, int(np.max(evaluate(s.stop, ctx, self.buffers)))))
        for start in range(0, extent, chunk):
            n = min(chunk, extent - start)
            shape = [1] * self.ndim
            shape[axis] = n
            inner = dict(ctx)
            inner[s.var] = np.arange(start, start + n, dtype=np.int64).reshape(shape)
            inner[_DEPTH] = axis + 1
            self._extent[axis] = n
            self.body(s.body, inner, axes, size * n)


_DEPTH = "__depth__"


def _accumulators(loop: Loop):
    out = []

    def rec(stmts):
        for s in stmts:
            if isinstance(s, Accumulate):
                out.append((s.acc, s.reduction))
            elif isinstance(s, Loop):
                rec(s.body)
    rec(loop.body)
    return out


def _sliced(src: np.ndarray, index, ctx, ndim: int):
    """`src` at `index` through a slice when every index is a constant or a loop variable
    plus a constant, each variable on its own loop axis, all within bounds: the tensor's
    block laid along the loops' axes, the elements advanced indexing would gather in the
    same layout, copied as a block rather than element by element from index arrays
    (half of interpreting a decode step). None when the index is any other form."""
    if not index or len(index) != src.ndim:
        return None
    picks, axes, shape, loops = [], [], [1] * ndim, False
    for e, extent in zip(index, src.shape):
        if not e.terms:
            if not 0 <= e.const < extent:
                return None
            picks.append(e.const)
            continue
        if len(e.terms) != 1:
            return None
        atom, coef = e.terms[0]
        if coef != 1 or type(atom) is not Var:
            return None
        arr = ctx[atom.name]
        lo, n, loops = int(arr.flat[0]) + e.const, arr.size, True
        if lo < 0 or lo + n > extent or arr.ndim != ndim:
            return None
        if n == 1:
            picks.append(lo)
            continue
        axis = arr.shape.index(n)
        if axis in axes:        # one variable indexing two dimensions: a diagonal
            return None
        picks.append(slice(lo, lo + n))
        axes.append(axis)
        shape[axis] = n
    if not loops:       # a constant index: one element, shaped as advanced indexing shapes it
        return None
    view = src[tuple(picks)]
    order = sorted(range(len(axes)), key=axes.__getitem__)
    # contiguous like advanced indexing's result: numpy sums in an order that follows the
    # layout, so a strided view would round a reduction differently
    return np.ascontiguousarray(view.transpose(order).reshape(shape))
