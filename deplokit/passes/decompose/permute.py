"""permute: reorder axes."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


@rule("permute")
def decompose_permute(op, b: Builder) -> str:
    return b.permute(op.args[0], tuple(op.attr("dims")), "permute")
