"""The fuse pass, Tensor IR → Loop IR: fuse producers into consumers (after `lift`,
lift.py, which made every node a loop nest of its own).

Graph outputs are stored. Every other node is inlined into the kernels that read it (a
pointwise producer as a prologue, a reduction as a reduce phase) until the guard
(guard.py) or the structure says no; then it is stored and read back by its consumers.
Repeats until no kernel objects, so every decision is explained in `decisions`. Attention
fusion (attention.py) and row fusion (rows.py) are the pipeline's next passes."""
from __future__ import annotations

import dataclasses

from ...analysis.computes import kernel_names
from ...ir.loop_ir import LoopProgram
from ...ir.tensor_ir import (
    CONVERT_OP,
    STORAGE_OPS,
    Elementwise,
    IndexMap,
    Reduction,
    TensorProgram,
    Update,
    written_buffer,
)
from ...ir.types import HALF_DTYPES
from ..record import Noted, Pass, Skip
from .build import BuiltKernel, KernelBuilder, NeedMaterialise, routed_reductions
from .guard import compounding_copies, judge


def fuse_kernels(program: TensorProgram) -> tuple[LoopProgram, tuple[str, ...]]:
    """Every Tensor-IR node lifted to a loop nest and fused into its consumers where the
    guard allows: the kernels and one decision line per store and per kernel."""
    builds: dict = {}
    loop, decisions, compounding = _fuse(program, (), builds)
    if compounding:
        # Values stored against compounding copies are known only once the kernels exist;
        # by then other values were stored on their account (a matmul nested in a norm that
        # recomputed the residual stream). Fuse again with them stored from the start, so the
        # matmul becomes the residual add's reduce phase again.
        loop, decisions, _ = _fuse(program, compounding, builds)
    return loop, decisions


class _Consulted:
    """The stored set as a build sees it, noting each membership it asks about: a build is
    a function of its root and those answers, so one made before is reused while they hold."""

    def __init__(self, stored: set[str]):
        self.stored, self.seen = stored, {}

    def __contains__(self, name) -> bool:
        answer = self.seen[name] = name in self.stored
        return answer


def _build(nodes, stored: set[str], root: str, shapes, builds: dict, routed: frozenset = frozenset()):
    """KernelBuilder(nodes, stored, root).build(shapes), or the same build made before under
    the same answers about what is stored (the second round of fuse_kernels rebuilds most
    kernels of a model unchanged); NeedMaterialise is raised again as it was."""
    for seen, result in builds.get(root, ()):
        if all((name in stored) == answer for name, answer in seen.items()):
            break
    else:
        consulted = _Consulted(stored)
        try:
            result = KernelBuilder(nodes, consulted, root, routed).build(shapes)
        except NeedMaterialise as e:
            result = e
        builds.setdefault(root, []).append((consulted.seen, result))
    if isinstance(result, NeedMaterialise):
        raise result
    return result


def _fuse(program: TensorProgram, seeded: tuple[tuple[str, str], ...], builds: dict):
    """(LoopProgram, decisions, the stores made against compounding copies). `seeded`:
    (node, reason) pairs stored from the start; `builds`: the builds made so far (_build)."""
    nodes = {n.name: n for n in program.nodes}
    routed = routed_reductions(nodes)
    order = {n.name: i for i, n in enumerate(program.nodes)}
    shapes = {b.name: b.type.shape for b in program.buffers}
    numel = {n.name: n.type.numel for n in program.nodes}
    stored = {o for o in program.outputs if o in nodes} | {node for node, _ in seeded}
    # An in-place write into state is a kernel of its own: its readers read the whole state.
    stored |= {n.name for n in program.nodes if isinstance(n, Update)}
    decisions: list[str] = [f"store {node}: {reason}" for node, reason in seeded]
    # a half value a contraction reads, where eager stores it (decompose records them)
    for node in sorted(program.stored_half - stored, key=order.__getitem__):
        decisions.append(f"store {node}: eager stores it in {nodes[node].type.dtype} before a matmul or "
                         f"attention reads it; stored in half, so a tensor core reads it as it is")
    stored |= program.stored_half
    compounding: list[tuple[str, str]] = list(seeded)
    built: dict[str, BuiltKernel] = {}
    verdicts: dict[str, str] = {}   # root -> the guard's reason for the kernel it passed
    consumers: dict[str, list[str]] = {}
    producers = {n.name: tuple(n.inputs()) for n in program.nodes}
    free = frozenset(n.name for n in program.nodes if isinstance(n, Elementwise) and n.op in STORAGE_OPS)
    # values of runtime scalars alone (a position's bound, its broadcast): an integer op on one
    # loaded element, recomputed anywhere for nothing
    scalar_only = {b.name for b in program.buffers if b.kind == "scalar"}
    for n in program.nodes:
        if isinstance(n, (Elementwise, IndexMap)) and n.inputs() and set(n.inputs()) <= scalar_only:
            scalar_only.add(n.name)
    free |= scalar_only
    half_products = half_contractions(program)
    for n in program.nodes:
        for i in n.inputs():
            consumers.setdefault(i, []).append(n.name)

    def materialise(node: str, reason: str):
        stored.add(node)
        decisions.append(f"store {node}: {reason}")
        for root in [r for r, bk in built.items() if node in bk.inlined]:
            del built[root]

    changed = True
    while changed:
        changed = False
        for root in sorted(stored, key=order.__getitem__):
            if root in built:
                continue
            try:
                bk = _build(nodes, stored, root, shapes, builds, routed)
            except NeedMaterialise as e:
                node = _promote(e.node, program, consumers, nodes) if e.nested else e.node
                reason = e.reason if node == e.node else f"{e.reason}; storing {node}"
                materialise(node, reason)
                changed = True
                break
            verdict = judge(bk.kernel.name, bk.evals, numel, bk.reduction_points, bk.reduction_instances, bk.work,
                            order, bk.contraction, bk.shared_along)
            if verdict.node is not None and verdict.node not in stored:
                materialise(verdict.node, verdict.reason)
                changed = True
                break
            both = sorted((r for r in bk.reduction_instances if r in half_products), key=order.__getitem__)
            if len(both) > 1:
                node = _promote(both[0], program, consumers, nodes)
                materialise(node, f"{bk.kernel.name} would sum {len(both)} products of half operands: an mma "
                                  f"accumulates one, so {both[0]} is its own kernel, on tensor cores")
                changed = True
                break
            built[root] = bk
            verdicts[root] = verdict.reason
        if changed:
            continue
        # A reduction fused into two kernels would be computed twice.
        seen: dict[str, str] = {}
        for root in sorted(built, key=order.__getitem__):
            for red in built[root].reduction_instances:
                if red in seen:
                    materialise(red, f"reduction {red} is read by kernels {seen[red]} and {built[root].kernel.name}")
                    changed = True
                    break
                seen[red] = built[root].kernel.name
            if changed:
                break
        if changed:
            continue
        for node, reason in compounding_copies({r: bk.inlined for r, bk in built.items()}, producers, stored, order,
                                               free):
            materialise(node, reason)
            compounding.append((node, reason))
            changed = True

    roots = sorted(built, key=order.__getitem__)
    # a model's kernels named by what they compute (analysis/computes.py), once the program is whole
    names = kernel_names(built[r].kernel for r in roots)
    kernels = tuple(dataclasses.replace(built[r].kernel, name=n) for r, n in zip(roots, names))
    for root, kernel in zip(roots, kernels):
        bk = built[root]
        members = sorted(bk.inlined - {root}, key=order.__getitem__)
        fused = f" fuses {', '.join(members)}" if members else ""
        ratio = f"{bk.work} work"
        if verdicts[root].startswith(("prologue ", "staged prologue ")):   # a kept prologue: say why
            ratio += f"; {verdicts[root]}"
        decisions.append(f"kernel {kernel.name}{fused} ({ratio})")
    written = tuple(written_buffer(nodes[r], program.outputs) for r in roots)
    loop = LoopProgram(program.buffers, written, kernels, program.outputs)
    return loop, tuple(decisions), tuple(compounding)


def half_contractions(program: TensorProgram) -> frozenset[str]:
    """The sums of products of two values read from half storage (through index maps and the
    exact convert to float32): the contractions a tensor core may run (001 stamps them)."""
    nodes = {n.name: n for n in program.nodes}
    halves = {b.name for b in program.buffers if b.type.dtype in HALF_DTYPES}
    halves |= {n.name for n in program.nodes if n.type.dtype in HALF_DTYPES}

    def from_half(name: str) -> bool:
        node = nodes.get(name)
        while name not in halves and (isinstance(node, IndexMap) or
                                      (isinstance(node, Elementwise) and node.op == CONVERT_OP)):
            name = node.src if isinstance(node, IndexMap) else node.args[0]
            node = nodes.get(name)
        return name in halves

    found = set()
    for n in program.nodes:
        product = nodes.get(n.src) if isinstance(n, Reduction) and n.op == "sum" else None
        if isinstance(product, Elementwise) and product.op == "multiply" and len(product.inputs()) == 2 \
                and all(from_half(a) for a in product.inputs()):
            found.add(n.name)
    return frozenset(found)


def _promote(red: str, program: TensorProgram, consumers: dict[str, list[str]], nodes: dict) -> str:
    """A nested reduction is stored where its Torch-IR op's result is (`linear`, not the
    keepdim `red`): follow the single-consumer chain of same-size pointwise and index-map
    nodes until a node that holds an op's result."""
    node = red
    while node not in program.op_results and node not in program.outputs:
        users = consumers.get(node, [])
        if len(users) != 1:
            return node
        user = nodes[users[0]]
        if isinstance(user, Reduction) or user.type.numel != nodes[node].type.numel:
            return red
        if isinstance(user, IndexMap) and (user.pad is not None or len(user.inputs()) > 1):
            return red
        node = user.name
    return node


def _apply(program, pctx):
    if program.graph is None:
        return Skip("not a lifted program: no Tensor-IR graph to fuse by")
    return Noted(*fuse_kernels(program.graph))


PASS = Pass("fuse", "loop", "fuse producers into their consumers' loop nests; store only what the guard keeps", _apply)
