"""Row fusion: attention's three kernels become one that keeps the scores row on chip.

The fusion guard stores attention's scores and probabilities (each S x T per batch and head)
because a reduction may not be recomputed: the softmax's max and sum need the whole row of
scores, and the P @ V contraction needs the whole row of probabilities for every output
column. So fusion alone leaves three kernels:

    scores = q @ k^T (scaled, masked)      producer: a contraction
    probs  = softmax(scores) along T       middle: row reductions (max, sum), then a row
    out    = probs @ v                     consumer: a contraction over T

(two when T = 1 lets the softmax join the scores) and both S x T tensors go through global
memory. But the kernels' outer free loops run over the same rows (batch, head, query), and
each row of a temporary is written and read within one row: row fusion nests the kernels'
row bodies, in order, under those common row loops and declares the temporaries *local*
(Kernel.locals): the kernel holds one row of T floats of each, on chip (shared memory once
scheduled), and nothing of S x T size is ever written to global memory.

It applies to a chain of consecutive kernels that starts and ends with a contraction and
holds a softmax (a row max outside any contraction): attention, from sdpa or written by
hand. A softmax that no contraction produces (softmax(x) @ w) keeps its tiled matmul, which
reuses w across rows where a row kernel would re-read it for every row. Each temporary must
be read by the next kernel only, not be a program output, depend on every row loop through
one dim each, and the locals' rows must fit ROW_BUDGET bytes; otherwise the trace says why.
"""
from __future__ import annotations

import dataclasses

from ...analysis.computes import KernelNamer
from ...ir.index import free_vars, var
from ...ir.loop_ir import Accumulate, Compute, Kernel, Load, LocalBuffer, Loop, LoopProgram, Store, walk
from ..fuse.guard import fusion_pays
from ..fuse.tidy import print_order_names, rename_body
from ..record import Noted, Pass, Skip, flag_knob
from .row_cost import row_fused_traffic, unfused_traffic

# Bytes of on-chip memory the local rows of one kernel may take (shared memory also holds
# staged inputs and reduction partials: Target.static_smem_per_block in all).
ROW_BUDGET = 32 * 1024


def fuse_rows(program: LoopProgram, enabled: bool = True, by_cost: bool = True) -> tuple[LoopProgram, tuple[str, ...]]:
    """Merge every chain of kernels (contraction -> softmax -> contraction, in three kernels
    or two) that qualifies and, with `by_cost`, that the fusion guard says pays: one block per
    row re-reads K and V for every query row, which costs more than the scores' round trip
    unless few rows share them (decode). Returns the program and one decision line per chain
    considered."""
    if not enabled:
        return program, ("rows: row fusion disabled by the config (fuse_rows.enable)",)
    kernels = list(program.kernels)
    temps = {b.name for b in program.written if b.kind == "temp"}
    types = program.types()
    notes: list[str] = []
    facts = ChainFacts()
    namer = KernelNamer()       # a model's merged kernel named by what it computes
    i = 0
    while i + 1 < len(kernels):
        for n in (3, 2):
            chain = kernels[i:i + n]
            plan = plan_chain(chain, kernels, temps, types, facts) if len(chain) == n else ""
            if not isinstance(plan, str):
                break
            if plan:
                notes.append(f"rows: {', '.join(k.name for k in chain)} stay separate kernels: {plan}")
                break
        if isinstance(plan, str):
            i += 1
            continue
        merged = merge_chain(chain, *plan)
        names = ", ".join(k.name for k in chain)
        wins, why = fusion_pays("one block per row", row_fused_traffic(merged, plan[0], types),
                                unfused_traffic(chain, types))
        if by_cost and not wins:
            notes.append(f"rows: {names} stay separate kernels: {why}")
            i += 1
            continue
        merged = dataclasses.replace(merged, name=namer.name_at(kernels, i, merged, "attention"))
        kernels[i:i + len(chain)] = [merged]
        rows = ", ".join(f"{b.name} [{', '.join(map(str, b.row_shape))}]" for b in merged.locals)
        size = sum(4 * b.row_numel for b in merged.locals)
        notes.append(f"rows: kernel {merged.name} fuses {names}; keeps one row "
                     f"of {rows} on chip ({size} bytes), never in global memory")
        notes.append(f"rows: {'cost: ' + why if wins else 'fused without the cost check (fuse_rows.by_cost): ' + why}")
        i += 1
    if len(kernels) == len(program.kernels):
        return program, tuple(notes)
    return with_kernels(program, kernels), tuple(notes)


def with_kernels(program: LoopProgram, kernels) -> LoopProgram:
    """The program running `kernels` (a merged kernel in place of its chain): temporaries no
    kernel writes any more are dropped."""
    kept = {n for k in kernels for n in k.outputs}
    written = tuple(b for b in program.written if b.name in kept)
    return LoopProgram(program.buffers, written, tuple(kernels), program.outputs)


# -- which chains qualify --------------------------------------------------------------------------
def row_loops(kernel: Kernel) -> list[Loop]:
    """The nested free loops at the top of the kernel, outermost first: each body holds one
    loop, after statements that need no loop of their own (hoisted loads and values)."""
    loops, body = [], kernel.body
    while body and isinstance(body[-1], Loop) and body[-1].kind == "free" and \
            not any(isinstance(s, Loop) for s in body[:-1]):
        loops.append(body[-1])
        body = body[-1].body
    return loops


def _row_body(kernel: Kernel, r: int) -> tuple:
    """What the kernel does for one row of its r outer loops: the statements above the
    inner row loops (moved inside: they read nothing the row loops change later), then the
    r-th loop's body."""
    pre, body = [], kernel.body
    for _ in range(r):
        pre += body[:-1]
        body = body[-1].body
    return tuple(pre) + tuple(body)


def _is_contraction(kernel: Kernel) -> bool:
    """The kernel sums products of two different values (a matmul's K loop; also one fusion
    did not mark M/N/K because an output axis has extent 1)."""
    defs = {s.dst: s for s, _ in walk(kernel.body) if isinstance(s, Compute)}
    for s, loops in walk(kernel.body):
        if isinstance(s, Loop) and s.role == "K":
            return True
        if isinstance(s, Accumulate) and s.reduction == "sum" and s.value in defs:
            c = defs[s.value]
            if c.op == "multiply" and all(isinstance(a, str) for a in c.args) and c.args[0] != c.args[1]:
                return True
    return False


def _has_row_max(kernel: Kernel) -> bool:
    """A max reduction outside any contraction: a softmax's."""
    return any(isinstance(s, Accumulate) and s.reduction == "max" and not any(lp.role == "K" for lp in loops)
               for s, loops in walk(kernel.body))


class ChainFacts:
    """What the chain tests ask of a kernel, computed once per kernel (each is a walk)."""

    def __init__(self):
        self._memo: dict = {}

    def __call__(self, kernel: Kernel, what: str):
        key = (id(kernel), what)
        if key not in self._memo:
            fn = {"contraction": _is_contraction, "row_max": _has_row_max, "inputs": lambda k: set(k.inputs())}
            self._memo[key] = (kernel, fn[what](kernel))     # the kernel kept alive: its id stays unique
        return self._memo[key][1]


def plan_chain(chain, kernels, temps, types, facts):
    """(row depth, locals) when the chain qualifies; else the reason it does not ('' when it
    is not the pattern at all, so no note is worth printing)."""
    first, last = chain[0], chain[-1]
    if not (facts(first, "contraction") and facts(last, "contraction")) or \
            not any(facts(k, "row_max") for k in chain):
        return ""
    if any(k.flash is not None for k in chain):
        return ""              # a flash kernel is fused already: its online state lives in its own locals
    if any(len(k.outputs) != 1 for k in chain[:-1]):
        return ""
    links = [(k.outputs[0], nxt) for k, nxt in zip(chain, chain[1:])]
    for t, reader in links:
        users = {k.name for k in kernels if t in facts(k, "inputs")}
        if users != {reader.name}:
            return ""                               # not one chain: some other kernel reads t
        if t not in temps:
            return f"{t} is a program output"
    r = min(len(row_loops(k)) for k in chain)
    extents = [lp.extent for lp in row_loops(chain[0])[:r]]
    for k in chain[1:]:
        if [lp.extent for lp in row_loops(k)[:r]] != extents:
            return f"{k.name} does not run over the same rows {tuple(extents)}"
    locals_ = []
    for t, _ in links:
        found = _row_dims(t, chain, r, types[t])
        if isinstance(found, str):
            return found
        dims, ttype = found
        if ttype.dtype != "float32":
            return f"{t} is {ttype.dtype}"
        locals_.append(LocalBuffer(t, ttype, dims))
    size = sum(4 * b.row_numel for b in locals_)
    if size > ROW_BUDGET:
        return (f"rows of {', '.join(b.name for b in locals_)} take {size} bytes, more than the "
                f"{ROW_BUDGET} bytes kept on chip")
    return r, tuple(locals_)


def _row_dims(tensor: str, chain, r: int, ttype):
    """(dims held per row, type) of a temp: in every store and load of it, each row loop j
    indexes one dim, the same for every access, and no other dim depends on a row loop. An
    access no row loop indexes reads other rows than the one on chip: attention's P @ V
    stored transposed, (P @ V)^T[d, i], loops over d outermost, so at S = D its outer loop
    runs over as many d as the softmax's over rows i, but its loads of P walk the rows i."""
    dim_of: dict[int, int] = {}
    for k in chain:
        row_vars = [lp.var for lp in row_loops(k)[:r]]
        for s, _ in walk(k.body):
            if not isinstance(s, (Load, Store)) or s.tensor != tensor:
                continue
            if isinstance(s, Load) and s.pad is not None:
                return f"{tensor} is read with padding"
            rows_here = set()
            for d, e in enumerate(s.index):
                used = free_vars(e) & set(row_vars)
                if not used:
                    continue
                j = row_vars.index(next(iter(used)))
                if e != var(row_vars[j]) or dim_of.setdefault(j, d) != d:
                    return f"{tensor}[{', '.join(map(str, s.index))}] in {k.name} is not one row per row loop"
                rows_here.add(j)
            if len(rows_here) != r:
                return (f"{tensor}[{', '.join(map(str, s.index))}] in {k.name} is not indexed by its every row loop: "
                        f"it reads other rows")
    if len(dim_of) != r:
        return f"{tensor} does not depend on every row loop: its rows would be shared"
    row = tuple(d for d in range(ttype.rank) if d not in dim_of.values() and ttype.shape[d] != 1)
    return row, ttype


# -- merging ----------------------------------------------------------------------------------------
def merge_chain(chain, r: int, locals_: tuple[LocalBuffer, ...]) -> Kernel:
    """The three kernels' row bodies, in order, under the common row loops."""
    rows = row_loops(chain[0])
    common = [f"%row{j}" for j in range(r)]
    body: list = []
    for n, k in enumerate(chain):
        names = {lp.var: common[j] for j, lp in enumerate(row_loops(k)[:r])}
        body += _prefixed(_row_body(k, r), f"%k{n}_", names)
    merged = tuple(body)
    for j in reversed(range(r)):
        merged = (Loop(common[j], rows[j].extent, "free", merged),)
    last = chain[-1]
    return Kernel(last.name, last.outputs, renumber(merged), locals_)


def defined_names(body, out: dict, prefix: str) -> None:
    for s in body:
        if isinstance(s, Loop):
            out.setdefault(s.var, prefix + s.var)
            defined_names(s.body, out, prefix)
        elif isinstance(s, (Load, Compute)):
            out.setdefault(s.dst, prefix + s.dst)
        elif isinstance(s, Accumulate):
            out.setdefault(s.acc, prefix + s.acc)


def _prefixed(body, prefix: str, names: dict) -> list:
    """The body with every name it defines made unique by `prefix`, row vars renamed by
    `names`, and loop roles dropped (the merged kernel is a row kernel, not a matmul)."""
    names = dict(names)
    defined_names(body, names, prefix)
    loops = {s.var for s, _ in walk(body) if isinstance(s, Loop)}
    loops |= {old for old, new in names.items() if new.startswith("%row")}   # the row loops, outside
    return list(rename_body(body, names, loops, roles=False))


def renumber(body) -> tuple:
    """Stable names in print order, as fusion gives them: a0.., in0.., v0.., acc0.."""
    return rename_body(body, print_order_names(body))


def _apply(program, pctx):
    loop, notes = fuse_rows(program, by_cost=pctx.knobs["by_cost"])
    if loop == program:
        return Skip("; ".join(notes) or "no chain of contraction, softmax, contraction kernels")
    return Noted(loop, notes)


PASS = Pass("fuse_rows", "loop", "merge attention's kernels so that no scores row leaves the chip", _apply,
            (flag_knob("enable", "keep attention's scores and probabilities a row at a time on chip", "row fusion"),
             flag_knob("by_cost", "fuse only where the fusion guard counts fewer bytes moved and no more work")))
