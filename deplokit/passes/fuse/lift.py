"""lift: Tensor IR -> Loop IR, every node its own loop nest.

Each Tensor-IR node becomes one kernel that reads its inputs from memory and stores its
result (a pointwise node: one loop nest over its shape; a reduction: a reduce loop inside
the loops over the axes it keeps; an index map: a copy through its index). Nothing is
fused yet: the lifted program is executable Loop IR in which every intermediate goes
through memory, the starting point the next pass (fuse) improves on, and the diff between
the two shows exactly what fusion removed.

Fusion decides on the Tensor-IR graph (which producer to inline into which consumer,
guard.py): the lifted program keeps the graph it was lifted from (LoopProgram.graph,
not printed), kernel k computing graph node k."""
from __future__ import annotations

from ...ir.loop_ir import LoopProgram
from ...ir.tensor_ir import TensorProgram, written_buffer
from .build import KernelBuilder


def lift(program: TensorProgram) -> LoopProgram:
    """One kernel per Tensor-IR node, in program order, every node's result in memory."""
    every = {n.name for n in program.nodes}
    nodes = {n.name: n for n in program.nodes}
    shapes = {b.name: b.type.shape for b in program.buffers}
    kernels = tuple(KernelBuilder(nodes, every, n.name).build(shapes).kernel for n in program.nodes)
    written = tuple(written_buffer(n, program.outputs) for n in program.nodes)
    return LoopProgram(program.buffers, written, kernels, program.outputs, graph=program)
