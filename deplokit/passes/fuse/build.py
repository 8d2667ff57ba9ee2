"""Build one Loop-IR kernel: a Tensor-IR root with its inlined producers and fused
reductions, scheduled as

    for outer vars:            (the axes the fused reductions are indexed by)
        reduce phase(s)        (prologue inside the reduce)
        scalar epilogue        (values that need only outer vars and accumulators)
        for inner vars:        (the remaining axes)
            ... root[...] = v

Every expression is placed in the outermost loop whose variables it uses (loop-invariant
code motion), loads first in each body, and names are given in print order."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.index import DIM_NAMES, Affine, bounds, const, free_vars, gathers, substitute, var
from ...ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, Store
from ...ir.tensor_ir import STORAGE_OPS, Axis, Elementwise, IndexMap, Reduction, TensorNode, Update
from .expr import EAcc, ELoad, EOp, ExprTable, IntConst
from .tidy import annotate_roles, article_notes, count_evaluations, loads_first, rename_in_print_order


class NeedMaterialise(Exception):
    def __init__(self, node: str, reason: str, nested: bool = False):
        super().__init__(reason)
        self.node, self.reason, self.nested = node, reason, nested


@dataclass
class Instance:
    red: Reduction
    index: tuple[Affine, ...]
    reduce_vars: tuple[tuple[str, int], ...]
    body: int = -1


@dataclass
class BuiltKernel:
    kernel: Kernel
    inlined: frozenset[str]           # Tensor-IR nodes computed inside (root included)
    evals: dict[str, int]             # executions of each Elementwise node's statement
    reduction_points: dict[str, int]  # evaluations of each fused reduction (per output element: 1)
    reduction_instances: dict[str, int]
    work: int
    contraction: bool = False         # a fused sum of products with M, N, K roles (a matmul)
    # a contraction's prologue node -> the extent of the output axis its value does not vary
    # along (N for an A-side prologue, M for a B-side one): staged with its operand's slab,
    # it is computed once per block along that axis instead of once per output column
    shared_along: dict[str, int] = field(default_factory=dict)


@dataclass
class _Frame:
    var: str | None
    extent: int
    kind: str
    stmts: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    role: str = ""


def routed_reductions(nodes: dict[str, TensorNode]) -> frozenset[str]:
    """Reductions that read an operand at a place chosen by data (an IndexMap with a gather in
    the pointwise and index-map nodes they sum over): a grouped matmul's product with each
    tile's expert weights, `w[expert[p], k, n]`."""
    gathered: set[str] = set()       # pointwise and index-map values that read through a gather
    for node in nodes.values():         # in program order: inputs first
        if isinstance(node, IndexMap) and any(gathers(e) for e in node.index) \
                or isinstance(node, (Elementwise, IndexMap)) and gathered.intersection(node.inputs()):
            gathered.add(node.name)
    return frozenset(n.name for n in nodes.values() if isinstance(n, Reduction) and n.src in gathered)


class KernelBuilder:
    def __init__(self, nodes: dict[str, TensorNode], stored: set[str], root: str,
                 routed: frozenset[str] = frozenset()):
        self.nodes, self.stored, self.root = nodes, stored, root
        self.routed = routed        # routed_reductions(nodes): never inlined at rows chosen by data
        self.table = ExprTable()
        self.memo: dict = {}
        self.instances: list[Instance] = []
        self.instance_of: dict = {}
        self.ranges: dict[str, int] = {}
        self.reduce_context: list[frozenset[str]] = []
        self.inlined: set[str] = set()
        self.masked = 0          # > 0 while computing a value a padded map may discard
        self._n = 0

    def _fresh(self, prefix: str) -> str:
        self._n += 1
        return f"%{prefix}{self._n}"

    # -- expressions ------------------------------------------------------------------------
    def value(self, name: str, index: tuple[Affine, ...]):
        key = (name, index, self.masked)
        if key in self.memo:
            return self.memo[key]
        if name != self.root and (name in self.stored or name not in self.nodes):
            out = self._load(name, index, 0.0 if self.masked else None)
        else:
            out = self._compute(self.nodes[name], index)
        self.memo[key] = out
        return out

    def _load(self, name, index, pad):
        for ix in index:
            self._in_memory(ix)
        return self.table.add(ELoad(name, index, pad))

    def _in_memory(self, ix: Affine) -> Affine:
        """ix, once every tensor it gathers from is in memory: a kernel reads an index
        tensor, it does not compute one (a load's index, a padded map's bounds test, an
        axis used as a value)."""
        for g in gathers(ix):
            if g.tensor in self.nodes and g.tensor not in self.stored:
                raise NeedMaterialise(g.tensor, f"{g.tensor} is read as an index and must be in memory")
        return ix

    def _compute(self, node: TensorNode, index):
        self.inlined.add(node.name)
        if isinstance(node, Elementwise):
            args = []
            for a in node.args:
                if isinstance(a, str):
                    args.append(self.value(a, index))
                elif isinstance(a, Axis):
                    args.append(self._in_memory(index[a.dim]))
                elif isinstance(a, int) and not isinstance(a, bool):
                    args.append(IntConst(a))       # integer arithmetic keeps its constants exact
                else:
                    args.append(float(a))
            return self.table.add(EOp(node.op, tuple(args), node.name, node.type.dtype))
        if isinstance(node, IndexMap):
            mapping = {DIM_NAMES[k]: ix for k, ix in enumerate(index)}
            new = tuple(substitute(e, mapping, self.ranges) for e in node.index)
            if node.pad is not None:
                if node.src not in self.nodes or node.src in self.stored:
                    return self._load(node.src, new, node.pad)
                return self._padded(node, new)
            return self.value(node.src, new)
        return self._reduction(node, index)

    def _padded(self, node: IndexMap, index):
        """A computed value read through a padded map: where(in bounds, value, pad). The
        value is computed with safe loads (out-of-range reads give 0), then discarded."""
        src_shape = self.nodes[node.src].type.shape
        conds = []
        for ix, extent in zip(index, src_shape):
            b = bounds(ix, self.ranges)
            if b is not None and b[0] >= 0 and b[1] < extent:
                continue
            if b is None or b[0] < 0:
                conds.append(self.table.add(EOp("greater_equal", (self._in_memory(ix), 0.0), node.name, "bool")))
            if b is None or b[1] >= extent:
                conds.append(self.table.add(EOp("less", (self._in_memory(ix), float(extent)), node.name, "bool")))
        self.masked += 1
        try:
            inner = self.value(node.src, index)
        finally:
            self.masked -= 1
        self.inlined.add(node.name)
        if not conds:
            return inner
        cond = conds[0]
        for c in conds[1:]:
            cond = self.table.add(EOp("logical_and", (cond, c), node.name, "bool"))
        return self.table.add(EOp("where", (cond, inner, float(node.pad)), node.name, node.type.dtype))

    def _reduction(self, red: Reduction, index):
        used = set()
        for ix in index:
            used |= free_vars(ix)
        for ctx in self.reduce_context:
            if used & ctx:
                raise NeedMaterialise(red.name, f"reduction {red.name} is nested inside another reduction",
                                      nested=True)
        if red.name in self.routed and any(gathers(ix) for ix in index):
            # its reader's gather would tile it by the reader's rows (one expert's weights
            # per row); stored, it keeps its own domain (one expert per tile: a grouped matmul)
            raise NeedMaterialise(red.name, f"reduction {red.name} reads operands chosen by data and is read back "
                                            f"at places chosen by data: computed once on its own domain")
        key = (red.name, index)
        if key in self.instance_of:
            return self.table.add(EAcc(self.instance_of[key]))
        src_shape = self.nodes[red.src].type.shape if red.src in self.nodes else None
        src_shape = src_shape or self._buffer_shape(red.src)
        rvars = []
        body_index = list(index)
        for ax in red.axes:
            v = self._fresh("r")
            self.ranges[v] = src_shape[ax]
            rvars.append((v, src_shape[ax]))
            body_index[ax] = var(v) if src_shape[ax] != 1 else const(0)
        inst = Instance(red, tuple(index), tuple(rvars))
        self.reduce_context.append(frozenset(v for v, _ in rvars))
        inst.body = self.value(red.src, tuple(body_index))
        self.reduce_context.pop()
        self.inlined.add(red.name)
        self.instance_of[key] = len(self.instances)
        self.instances.append(inst)
        return self.table.add(EAcc(self.instance_of[key]))

    def _shape_of(self, name):
        return tuple(self.nodes[name].type.shape) if name in self.nodes else tuple(self.buffer_shapes[name])

    def _buffer_shape(self, name):
        return self.buffer_shapes[name]

    # -- scheduling -------------------------------------------------------------------------
    def build(self, buffer_shapes: dict[str, tuple[int, ...]]) -> BuiltKernel:
        self.buffer_shapes = buffer_shapes
        root = self.nodes[self.root]
        # An Update's loops run over what it writes (src), stored at its index into the state.
        update = root if isinstance(root, Update) else None
        shape = update.src_shape if update else root.type.shape
        root_vars, index = [], []
        for d, e in enumerate(shape):
            if e == 1:
                index.append(const(0))
            else:
                v = self._fresh("o")
                self.ranges[v] = e
                root_vars.append((v, e))
                index.append(var(v))
        index = tuple(index)
        if update:
            self.inlined.add(self.root)
            top = self.value(update.src, index)
            at = {DIM_NAMES[d]: ix for d, ix in enumerate(index)}
            store_at = tuple(self._in_memory(substitute(e, at, self.ranges)) for e in update.index)
        else:
            top = self.value(self.root, index)
            store_at = index

        outer_names = set()
        for inst in self.instances:
            for ix in inst.index:
                outer_names |= free_vars(ix)
        outer = [(v, e) for v, e in root_vars if v in outer_names]
        inner = [(v, e) for v, e in root_vars if v not in outer_names]

        self.frames = [_Frame(None, 1, "top")]
        self.depth: dict[str, int] = {}
        self.acc_names: dict[int, str] = {}
        self.acc_depth = len(outer)
        for v, e in outer:
            self._open(v, e, "free")
        for i, inst in enumerate(self.instances):
            for v, e in inst.reduce_vars:
                self._open(v, e, "reduce")
            value = self._emit(inst.body)
            acc = self._fresh("acc")
            self.frames[-1].stmts.append(Accumulate(acc, inst.red.op, value, dtype=inst.red.type.dtype))
            for _ in inst.reduce_vars:
                self._close()
            self.acc_names[i] = acc
        for v, e in inner:
            self._open(v, e, "free")
        value = self._emit(top)
        self.frames[-1].stmts.append(Store(self.root, store_at, value))
        for _ in inner + outer:
            self._close()
        body = tuple(self.frames[0].stmts)

        roles = self._matmul_roles()
        body = annotate_roles(body, roles)
        body = loads_first(body)
        body, origins, names = rename_in_print_order(body)
        body = article_notes(body)
        acc_red = {names[self.acc_names[i]]: inst.red.name for i, inst in enumerate(self.instances)}
        evals, points, work = count_evaluations(body, origins, acc_red)
        for inst in self.instances:   # accumulate executions -> evaluations of the reduction
            size = 1
            for _, e in inst.reduce_vars:
                size *= e
            points[inst.red.name] = points.get(inst.red.name, 0) // size
        n_inst: dict[str, int] = {}
        for inst in self.instances:
            n_inst[inst.red.name] = n_inst.get(inst.red.name, 0) + 1
        name = self.root if len(self.inlined) <= 1 else f"merged_{self.root}"
        return BuiltKernel(Kernel(name, (self.root,), body), frozenset(self.inlined), evals, points, n_inst, work,
                           contraction=bool(roles), shared_along=self._shared_along(roles))

    def _shared_along(self, roles: dict[str, str]) -> dict[str, int]:
        """Each computed node of a contraction whose every expression varies along K and one
        operand's output axis only (M for A, N for B): the extent of the other output axis."""
        if not roles:
            return {}
        extent = {role: 1 for role in ("M", "N")}
        for v, role in roles.items():
            if role in extent:
                extent[role] *= self.ranges[v]
        sides: dict[str, set] = {}
        leaves: set = set()
        for e, ex in enumerate(self.table.exprs):
            if isinstance(ex, EOp):
                used = {roles.get(v, "?") for v in self.table.vars[e]}
                side = "A" if used <= {"M", "K"} and "K" in used else "B" if used <= {"N", "K"} and "K" in used \
                    else None
                if side and ex.op in STORAGE_OPS:   # a half operand's stage holds its half elements
                    return {}
                if side:
                    leaves.update((side, self.table.exprs[a]) for a in ex.args
                                  if isinstance(a, int) and isinstance(self.table.exprs[a], ELoad))
                sides.setdefault(ex.origin, set()).add(side)
        # one slab: every leaf of a side's prologue read at the same index of a same-shaped
        # tensor (007 stages exactly that; silu(gate) * up, not x[m, k] * scale[k])
        for side in ("A", "B"):
            reads = {(ld.index, self._shape_of(ld.tensor)) for sd, ld in leaves if sd == side}
            padded = any(ld.pad is not None for sd, ld in leaves if sd == side)   # 007 stages no masked read
            if len(reads) > 1 or padded:
                sides = {n: {None} if side in ss else ss for n, ss in sides.items()}
        out = {}
        for node, s in sides.items():
            if s == {"A"}:
                out[node] = extent["N"]
            elif s == {"B"}:
                out[node] = extent["M"]
        return out

    def _open(self, v, extent, kind):
        self.frames.append(_Frame(v, extent, kind))
        self.depth[v] = len(self.frames) - 1

    def _close(self):
        f = self.frames.pop()
        self.frames[-1].stmts.append(Loop(f.var, f.extent, f.kind, tuple(f.stmts)))

    def _emit(self, e):
        if isinstance(e, (float, Affine)):
            return e
        if isinstance(e, IntConst):
            return e.value
        for f in reversed(self.frames):
            if e in f.memo:
                return f.memo[e]
        ex = self.table.exprs[e]
        if isinstance(ex, EAcc):
            return self.acc_names[ex.instance]
        depth = max((self.depth[v] for v in self.table.vars[e]), default=0)
        if self.table.accs[e]:   # after the reduce phases, in the innermost outer loop
            depth = max(depth, self.acc_depth)
        if isinstance(ex, ELoad):
            dst = self._fresh("in")
            stmt = Load(dst, ex.tensor, ex.index, ex.pad)
        else:
            args = tuple(self._emit(a) if isinstance(a, (int, IntConst)) else a for a in ex.args)
            dst = self._fresh("v")
            stmt = Compute(dst, ex.op, args, note=ex.origin, dtype=ex.dtype)
        self.frames[depth].stmts.append(stmt)
        self.frames[depth].memo[e] = dst
        return dst

    def _matmul_roles(self) -> dict[str, str]:
        """M/N/K roles when a fused sum reduces a product of two operands that each miss
        one output axis (a contraction)."""
        roles: dict[str, str] = {}
        for inst in self.instances:
            ex = self.table.exprs[inst.body]
            if inst.red.op != "sum" or not isinstance(ex, EOp) or ex.op != "multiply":
                continue
            a, b = ex.args
            if not (isinstance(a, int) and isinstance(b, int)):
                continue
            va, vb = self.table.vars[a], self.table.vars[b]
            only_a = {v for v in va - vb if v.startswith("%o")}
            only_b = {v for v in vb - va if v.startswith("%o")}
            if only_a and only_b:
                for v in only_a:
                    roles[v] = "M"
                for v in only_b:
                    roles[v] = "N"
                for v, _ in inst.reduce_vars:
                    roles[v] = "K"
                for v in self._routing_vars(a) | self._routing_vars(b):
                    if v in va & vb and v.startswith("%o"):
                        roles[v] = "G"
        return roles

    def _routing_vars(self, e: int) -> set[str]:
        """Variables that choose an operand's rows through a gather (a grouped matmul's slot
        p in w[expert[p], k, n]): role G, one slot per block (005), so that the gather is
        uniform over the block and its operand a box 007 stages once per tile."""
        out: set[str] = set()
        stack = [e]
        while stack:
            ex = self.table.exprs[stack.pop()]
            if isinstance(ex, ELoad):
                for ix in ex.index:
                    for g in gathers(ix):
                        for gi in g.index:
                            out |= free_vars(gi)
            elif isinstance(ex, EOp):
                stack.extend(a for a in ex.args if isinstance(a, int))
        return out
