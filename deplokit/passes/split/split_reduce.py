"""Loop IR → Loop IR: spread long reductions of few rows over many blocks (two-phase reduction).

A kernel reduces each of its rows in one block (004 cooperative_reduce; a matmul's outputs
share 16 x 16-thread tiles). Three softmax rows of 50 000 elements, or a matmul with 21
outputs and K = 50 000, keep 1 to 3 SMs of a 132-SM GPU busy. When the rows (blocks) are
fewer than half the target's SMs and every reduction of the row is long, the kernel becomes
a sequence of kernels:

    softmax_part0      for s, rows: partial max of chunk s            -> ws[s, rows]
    softmax_part1      for s, rows: max of ws0, partial sum of chunk s -> ws[s, rows]
    softmax_stats      for rows: the finished max and sum (S partials each, fixed order)
    softmax            for rows, i: the elementwise tail, reading the stats

Each partial kernel reduces chunk s (C elements) of every row into a workspace; a later kernel
combines the S partials of a row in a fixed order. No atomics: the result is bit-identical run
to run. A kernel whose tail stores one value per row (sum, mean, a matmul's outputs) ends in a
kernel that combines the partials and runs the tail itself. Chunk elements past the row end
read padded loads and accumulate the reduction's identity (a `where` guard), except where
every load the value comes from pads the same dimension with 0 and the value is that load or
a product of such loads (a matmul's K tail).

Knob: `split_reduce.splits` in the config forces the split count (1: off); by default
("auto") S = min(ceil(SMs / blocks), L // MIN_CHUNK) for each kernel, except a matmul of
output tiles (at least DOT_OUTPUTS outputs): 003 split_matmul_k splits its K.
"""
from __future__ import annotations

from ...ir.index import Affine, floordiv, free_vars, gathers, mod, var
from ...ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, LoopProgram, Store, walk
from ...ir.substitute import substitute_body
from ...ir.tensor_ir import reduction_identity
from ...ir.types import Buffer, TensorType
from ..record import Knob, Noted, Pass, Skip

MIN_LENGTH = 4096      # reduce loops shorter than this are not worth a second kernel
MIN_CHUNK = 1024       # elements each split reduces at least
DOT_OUTPUTS = 256      # a matmul with fewer outputs reduces each one as a row (see _Shape)
CHUNK_ALIGN = 32       # chunks are whole warps of elements
_COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


class _Shape:
    """A kernel as rows (its perfect nest of outer free loops) and a row body of Loads,
    Computes, reduce loops, then a tail; or why it is not one."""

    def __init__(self, kernel: Kernel):
        self.reason = ""
        self.rows: list[Loop] = []
        body = kernel.body
        while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "free":
            self.rows.append(body[0])
            body = body[0].body
        self.body = body = tuple(_flatten(s) if isinstance(s, Loop) and s.kind == "reduce" else s for s in body)
        outputs = 1
        for lp in self.rows:
            outputs *= lp.extent if lp.role in ("M", "N") else 1
        if any(isinstance(s, Loop) and s.role == "K" for s in body) and outputs < DOT_OUTPUTS:
            # A matmul of fewer outputs than one 16 x 16 tile: each output a dot product,
            # reduced like a row (a block's lanes share its K), not a tile of 16 x 16 threads.
            self.rows = [_unrole(lp) for lp in self.rows]
            self.body = body = tuple(_unrole(s) if isinstance(s, Loop) else s for s in body)
        reduces = [i for i, s in enumerate(body) if isinstance(s, Loop) and s.kind == "reduce"]
        if kernel.locals:
            self.reason = "keeps rows on chip (row fusion)"
        elif not reduces:
            self.reason = "no reduction"
        else:
            last = reduces[-1]
            self.reduces = [body[i] for i in reduces]
            self.pre_tail = body[:last]
            self.tail = body[last + 1:]
            odd = [s for s in self.pre_tail if not isinstance(s, (Load, Compute)) and s not in self.reduces]
            if odd:
                self.reason = "a loop or store between its reductions"
            elif any(g for r in self.reduces for s, _ in walk(r.body) if isinstance(s, Load)
                     for e in s.index for g in gathers(e) if r.var in free_vars(e)):
                self.reason = "a gather indexed by the reduction"

    @property
    def blocks(self) -> int:
        """Blocks the schedule gives it, roughly: one per row; 16 x 16 outputs of a matmul."""
        n = 1
        for lp in self.rows:
            n *= -(-lp.extent // 16) if lp.role in ("M", "N") else lp.extent
        return n

    def elementwise_tail(self) -> Loop | None:
        """The tail's one free loop when the tail stores nothing else (softmax, rmsnorm)."""
        loops = [s for s in self.tail if isinstance(s, Loop)]
        if len(loops) == 1 and loops[0].kind == "free" and not any(isinstance(s, Store) for s in self.tail):
            return loops[0]
        return None


def _unrole(lp: Loop) -> Loop:
    return Loop(lp.var, lp.extent, lp.kind, lp.body, "", lp.unroll)


def _flatten(red: Loop) -> Loop:
    """A perfect nest of reduce loops (a full sum) as one reduce loop over their product."""
    nest = [red]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], Loop) and nest[-1].body[0].kind == "reduce":
        nest.append(nest[-1].body[0])
    if len(nest) == 1:
        return red
    total, mapping, inner = 1, {}, 1
    for lp in reversed(nest):
        total *= lp.extent
    for k, lp in reversed(list(enumerate(nest))):
        q = floordiv(var(red.var), inner)
        mapping[lp.var] = q if k == 0 else mod(q, lp.extent)
        inner *= lp.extent
    body = substitute_body(nest[-1].body, mapping, {red.var: total})
    return Loop(red.var, total, "reduce", body, red.role, red.unroll)


def default_splits(shape: _Shape, target) -> int:
    shortest = min(r.extent for r in shape.reduces)
    if shortest < MIN_LENGTH or 2 * shape.blocks > target.sm_count:
        return 1
    if any(r.role == "K" for r in shape.reduces):
        # a matmul of output tiles: 003 splits its K and plans the tiles with the splits
        # (schedule/grid_plan.py); split here, its parts would be tiled as batches
        return 1
    return max(1, min(-(-target.sm_count // shape.blocks), shortest // MIN_CHUNK))


class _Names:
    def __init__(self, taken):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}{n}", n + 1
        self.taken.add(name)
        return name


def _names_in(kernel: Kernel) -> set[str]:
    out = set()
    for s, _ in walk(kernel.body):
        if isinstance(s, Loop):
            out.add(s.var)
        for attr in ("dst", "acc"):
            if hasattr(s, attr):
                out.add(getattr(s, attr))
        if isinstance(s, (Load, Store)):
            for e in s.index:
                out |= free_vars(e)
    return out


def _pads_dim(load: Load, v: str, length: int, types) -> bool:
    """The load reads a dimension of extent `length` at exactly `v` (so v >= length pads)."""
    shape = types[load.tensor].shape
    return any(e == var(v) and shape[d] == length for d, e in enumerate(load.index))


def _needs_guard(body, acc: Accumulate, v: str, length: int, types) -> bool:
    """Whether acc's value can be nonzero past the row end although its loads pad with 0."""
    if acc.reduction != "sum":
        return True
    defs = {s.dst: s for s, _ in walk(body) if isinstance(s, (Load, Compute))}

    def zero_load(name):
        s = defs.get(name)
        return isinstance(s, Load) and s.pad in (None, 0.0) and _pads_dim(s, v, length, types)

    d = defs.get(acc.value)
    if zero_load(acc.value):
        return False
    return not (isinstance(d, Compute) and d.op == "multiply" and all(isinstance(a, str) and zero_load(a)
                                                                           for a in d.args))


def _chunked(red: Loop, s: str, c: str, C: int, names: _Names, types) -> Loop:
    """The reduce loop over chunk s: index s*C + c, padded loads, accumulates guarded past L."""
    L = red.extent
    at = var(s) * C + var(c)
    guard = {id(a) for a, _ in walk(red.body) if isinstance(a, Accumulate)
             and _needs_guard(red.body, a, red.var, L, types)}

    def rewrite(body):
        out = []
        for st in body:
            if isinstance(st, Loop):
                out.append(Loop(st.var, st.extent, st.kind, rewrite(st.body), st.role, st.unroll))
                continue
            if isinstance(st, Load):
                moved = any(red.var in free_vars(e) for e in st.index)
                pad = st.pad if st.pad is not None or not moved else (
                    0.0 if types[st.tensor].dtype == "float32" else 0)
                out.append(Load(st.dst, st.tensor, st.index, pad))
            elif isinstance(st, Accumulate) and id(st) in guard:
                inside, kept = names(f"{c}_in"), names(f"{st.value}_g")
                out += [Compute(inside, "less", (at, L), dtype="bool"),
                        Compute(kept, "where", (inside, st.value, reduction_identity(st.reduction, st.dtype)),
                                dtype=st.dtype)]
                out.append(Accumulate(st.acc, st.reduction, kept, st.index, st.dtype))
            else:
                out.append(st)
        return tuple(out)

    body = substitute_body(rewrite(red.body), {red.var: at}, {s: -(-L // C), c: C})
    return Loop(c, C, "reduce", body, red.role, red.unroll)


def _accs(red: Loop) -> list[Accumulate]:
    seen, out = set(), []
    for s, _ in walk(red.body):
        if isinstance(s, Accumulate) and s.acc not in seen:
            seen.add(s.acc)
            out.append(s)
    return out


def _nest(loops, body) -> tuple:
    for lp in reversed(loops):
        body = (Loop(lp.var, lp.extent, lp.kind, tuple(body), lp.role, lp.unroll),)
    return tuple(body)


def split_kernel(kernel: Kernel, shape: _Shape, S: int, types: dict, taken: _Names):
    """The kernels replacing `kernel`, the buffers they add, and a note."""
    names = _Names(_names_in(kernel))
    rows = shape.rows
    row_index = tuple(var(lp.var) for lp in rows)
    row_shape = tuple(lp.extent for lp in rows)
    kernels, buffers, parts = [], [], {}        # acc -> (workspace, splits)
    splits = []

    def combine(accs):
        """Loops that finish each acc from its workspace: S partials, in order."""
        out = []
        for a in accs:
            ws, n = parts[a.acc]
            t, p = names("t"), names(f"{a.acc}_part")
            out.append(
                Loop(
                    t,
                    n,
                    "reduce",
                    (Load(p, ws, (var(t),) + row_index), Accumulate(a.acc, a.reduction, p, dtype=a.dtype)),
                )
            )
        return out

    done: list[Accumulate] = []
    for i, red in enumerate(shape.reduces):
        L = red.extent
        C = -(-L // S)
        C = -(-C // CHUNK_ALIGN) * CHUNK_ALIGN if C > CHUNK_ALIGN else C
        n = -(-L // C)
        s, c = names(f"{red.var}s"), names(f"{red.var}c")
        before = [st for st in shape.body[:shape.body.index(red)] if isinstance(st, (Load, Compute))]
        body = combine(done) + before + [_chunked(red, s, c, C, names, types)]
        accs = _accs(red)
        outputs = []
        for a in accs:
            ws = taken(f"{kernel.outputs[0]}_{a.acc}_part")
            buffers.append(Buffer(ws, TensorType((n,) + row_shape, a.dtype), "temp"))
            parts[a.acc] = (ws, n)
            outputs.append(ws)
            body.append(Store(ws, (var(s),) + row_index, a.acc))
        part = Loop(s, n, "free", _nest(rows, body))
        kernels.append(Kernel(taken(f"{kernel.name}_part{i}"), tuple(outputs), (part,)))
        done += accs
        splits.append(f"{red.var} into {n} x {C}")
    row_stmts = [st for st in shape.pre_tail + shape.tail if isinstance(st, (Load, Compute))]
    tail_loop = shape.elementwise_tail()
    if tail_loop is None:
        body = combine(done) + [st for st in shape.pre_tail if isinstance(st, (Load, Compute))] + list(shape.tail)
        kernels.append(Kernel(kernel.name, kernel.outputs, _nest(rows, body)))
    else:
        stats, loads = [], []
        for a in done:
            st = taken(f"{kernel.outputs[0]}_{a.acc}")
            buffers.append(Buffer(st, TensorType(row_shape or (1,), a.dtype), "temp"))
            stats.append(Store(st, row_index or (Affine(),), a.acc))
            loads.append(Load(a.acc, st, row_index or (Affine(),)))
        kernels.append(Kernel(taken(f"{kernel.name}_stats"), tuple(x.tensor for x in stats),
                              _nest(rows, combine(done) + stats)))
        inner = Loop(tail_loop.var, tail_loop.extent, "free", tuple(loads + row_stmts) + tail_loop.body,
                     tail_loop.role, tail_loop.unroll)
        kernels.append(Kernel(kernel.name, kernel.outputs, _nest(rows, [inner])))
    note = (f"{kernel.name}: {shape.blocks} block(s) would reduce; split {', '.join(splits)} "
            f"(partials combined in order, no atomics): {' -> '.join(k.name for k in kernels)}")
    return kernels, buffers, note


def split_reduce(program: LoopProgram, pctx):
    """Split the kernels whose few rows leave SMs idle; notes say which and why not."""
    forced = pctx.knobs.get("splits", "auto")
    types = program.types()
    taken = _Names(set(types) | {k.name for k in program.kernels})
    kernels, written, notes = [], list(program.written), []
    for k in program.kernels:
        shape = _Shape(k)
        if shape.reason:
            if forced not in ("auto", 1):
                notes.append(f"{k.name}: not split ({shape.reason})")
            kernels.append(k)
            continue
        S = default_splits(shape, pctx.target) if forced == "auto" else forced
        # a forced count still leaves every chunk a warp of elements or more: a 32-long
        # reduction in 32 chunks of one is as many blocks as elements (cumsum's 50k rows)
        S = min(S, min(r.extent for r in shape.reduces) // CHUNK_ALIGN)
        if S <= 1:
            if forced not in ("auto", 1):
                notes.append(f"{k.name}: not split (a reduction shorter than 2 x {CHUNK_ALIGN})")
            kernels.append(k)
            continue
        new, buffers, note = split_kernel(k, shape, S, types, taken)
        at = next(i for i, b in enumerate(written) if b.name in k.outputs)
        written[at:at] = buffers
        kernels += new
        notes.append(note)
    if len(kernels) == len(program.kernels):
        why = "off (splits=1)" if forced == 1 else (f"no kernel leaves SMs idle on few rows whose every reduction "
                                                     f"is >= {MIN_LENGTH} long")
        return Skip("; ".join(notes) or why)
    return Noted(LoopProgram(program.buffers, tuple(written), tuple(kernels), program.outputs), tuple(notes))


SPLITS = ("auto", 1, 2, 3, 4, 8, 16, 32, 64, 128, 256)
PASS = Pass(
    "split_reduce", "loop", "spread few long reductions over blocks: partials, then a combine in order",
    split_reduce,
    (Knob("splits", SPLITS, lambda program, target: "auto",
          "splits per row: auto (from rows, lengths and the target's SMs) or a count; 1 turns it off"),))
