"""The table from a Torch-IR op name to the rule that decomposes it into Tensor IR.

A rule takes the Torch-IR node and the Builder and returns the name of the tensor that
holds the op's result (it may be an existing tensor, for no-op copies)."""
from __future__ import annotations

from typing import Callable

from ...ir.torch_ir import TorchOp
from .builder import Builder

Rule = Callable[[TorchOp, Builder], str]
RULES: dict[str, Rule] = {}


def rule(*ops: str):
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn
    return register
