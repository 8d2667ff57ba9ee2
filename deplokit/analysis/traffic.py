"""What a kernel must move and compute, read off the IR: no GPU needed.

Bytes are *compulsory* global traffic: every buffer a kernel reads is read once and every
buffer it writes is written once (what a perfect cache would leave); FLOPs are the Loop IR's
arithmetic ops times the extents of the loops around them (a matmul's multiply and its
accumulate give 2·M·N·K). Benchmarks divide these by measured time for GB/s and FLOP/s; the
autotuner's cost model can use them as they are.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import loop_ir as L
from ..ir.index import free_vars, gathers
from .units import ctype_bytes, is_flop


@dataclass(frozen=True)
class KernelCost:
    name: str
    bytes_read: int
    bytes_written: int
    flops: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte of compulsory traffic."""
        return self.flops / self.bytes if self.bytes else 0.0


def loop_kernel_flops(kernel: L.Kernel) -> int:
    """FLOPs (units.is_flop: arithmetic Computes and each Accumulate) times the product
    of the extents of the loops around each."""
    total = 0
    for stmt, loops in L.walk(kernel.body):
        if is_flop(stmt):
            n = 1
            for loop in loops:
                n *= loop.extent
            total += n
    return total


def floor_flops(kernel: L.Kernel) -> int:
    """FLOPs as loop_kernel_flops counts them, but each Compute only over the loops its value
    depends on (the variables of the loads feeding it): a prologue of an operand staged inside
    a K loop (silu(gate) * up in down_proj's) counts once per element of that operand, not once
    per output column. Accumulates, and values read from a kernel's locals or not defined in
    the loop nest, count over every loop around them."""
    local = {b.name for b in kernel.locals}
    deps: dict[str, frozenset | None] = {}      # None: every enclosing loop
    total = 0
    for stmt, loops in L.walk(kernel.body):
        if isinstance(stmt, L.Load):
            deps[stmt.dst] = None if stmt.tensor in local else \
                frozenset().union(*(free_vars(e) for e in stmt.index))
        elif isinstance(stmt, L.Compute):
            used: frozenset | None = frozenset()
            for a in stmt.args:
                d = deps.get(a) if isinstance(a, str) else free_vars(a) if hasattr(a, "terms") else frozenset()
                used = None if used is None or d is None else used | d
            deps[stmt.dst] = used
        if not is_flop(stmt):
            continue
        n = 1
        for loop in loops:
            if isinstance(stmt, L.Accumulate) or deps.get(stmt.dst) is None or loop.var in deps[stmt.dst]:
                n *= loop.extent
        total += n
    return total


def elements_read(kernel: L.Kernel) -> dict[str, int]:
    """Per tensor, how many element reads the loop nest makes (loads, and the index tensors
    of gathers), each load times the extents of the loops around it."""
    reads: dict[str, int] = {}
    for stmt, loops in L.walk(kernel.body):
        if isinstance(stmt, L.Load):
            n = 1
            for loop in loops:
                n *= loop.extent
            for tensor in [stmt.tensor] + [g.tensor for e in stmt.index for g in gathers(e)]:
                reads[tensor] = reads.get(tensor, 0) + n
    return reads


def elements_stored(kernel: L.Kernel) -> dict[str, int]:
    """Per tensor, how many element stores the loop nest makes, each store times the extents
    of the loops around it."""
    stores: dict[str, int] = {}
    for stmt, loops in L.walk(kernel.body):
        if isinstance(stmt, L.Store):
            n = 1
            for loop in loops:
                n *= loop.extent
            stores[stmt.tensor] = stores.get(stmt.tensor, 0) + n
    return stores


def loop_kernel_cost(kernel: L.Kernel, types: dict) -> KernelCost:
    """Compulsory traffic and FLOPs of one Loop-IR kernel; `types` maps tensor -> TensorType.
    A tensor read fewer times than it has elements (an embedding table gathered by 128 token
    ids, a slice) counts only the elements read; an output stored in part (an in-place write
    of one row into a KV cache) only the elements stored."""
    reads = elements_read(kernel)
    stores = elements_stored(kernel)

    def size(name, elements):
        return elements * types[name].itemsize
    read = sum(size(n, min(types[n].numel, reads.get(n, 0))) for n in kernel.inputs() if n not in kernel.outputs)
    written = sum(size(n, min(types[n].numel, stores.get(n, types[n].numel))) for n in kernel.outputs)
    return KernelCost(kernel.name, read, written, loop_kernel_flops(kernel))


def kernel_func_bytes(kernel) -> tuple[int, int]:
    """(read, written) bytes of a Kernel-IR KernelFunc: its const parameters are read once,
    the others written once, each sized by its element count and ctype."""
    read = written = 0
    for p in kernel.params:
        n = p.size * ctype_bytes(p.ctype)
        if p.const:
            read += n
        else:
            written += n
    return read, written


def program_kernel_costs(kernel_program, loop_program) -> tuple[KernelCost, ...]:
    """One KernelCost per Kernel-IR kernel, in launch order: bytes from its parameters, FLOPs
    from the Loop-IR kernel of the same name (0 for kernels the lowering added, such as the
    `<name>_zero` kernel that clears a split-K output)."""
    flops = {k.name: loop_kernel_flops(k) for k in loop_program.kernels}
    out = []
    for k in kernel_program.kernels:
        read, written = kernel_func_bytes(k)
        out.append(KernelCost(k.name, read, written, flops.get(k.name, 0)))
    return tuple(out)


def program_cost(loop_program, name: str = "program") -> KernelCost:
    """The whole program's compulsory traffic (its inputs, parameters and constants that a
    kernel reads, and its outputs; temporaries between kernels are not counted, so eager,
    torch.compile and deplokit are measured against the same bytes) and its FLOPs."""
    types = loop_program.types()
    written = {b.name for b in loop_program.written}
    read_names: list[str] = []
    for k in loop_program.kernels:
        read_names += [n for n in k.inputs() if n not in written and n not in read_names]

    def size(n):
        return types[n].numel * types[n].itemsize
    return KernelCost(name, sum(size(n) for n in read_names), sum(size(n) for n in loop_program.outputs),
                      sum(loop_kernel_flops(k) for k in loop_program.kernels))
