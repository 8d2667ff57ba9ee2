"""stack: each tensor gets a new size-1 axis at `dim`, then they are concatenated along it."""
from __future__ import annotations

from ...ir.torch_ir import TorchOp
from .builder import Builder
from .cat import decompose_cat
from .registry import rule
from .unsqueeze import unsqueeze


@rule("stack")
def decompose_stack(op, b: Builder) -> str:
    rank = len(b.shape(op.args[0])) + 1
    dim = op.attr("dim", 0) % rank
    parts = tuple(unsqueeze(b, x, dim) for x in op.args)
    return decompose_cat(TorchOp(op.name, "cat", parts, (("dim", dim),), op.type), b)
