"""Torch IR: the captured program, one node per PyTorch operator (a 1:1 mirror).

    rms_norm = rms_norm(x, p_weight, normalized_shape=(2048,), eps=1e-06) -> (1, 32, 2048) float32

Tensor operands are names; everything else an operator takes is a keyword attribute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..display import Displayable
from .types import Buffer, TensorType, format_header, format_scalar


def format_attr(value: Any) -> str:
    if isinstance(value, tuple):
        if len(value) == 1:
            return f"({format_attr(value[0])},)"
        return "(" + ", ".join(format_attr(v) for v in value) + ")"
    if value is None:
        return "None"
    if isinstance(value, str):
        return value
    return format_scalar(value)


@dataclass(frozen=True)
class TorchOp:
    name: str
    op: str
    args: tuple                              # tensor operands by name, and scalar operands
    attrs: tuple[tuple[str, Any], ...]       # (key, value) in the operator's own order
    type: TensorType

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def __str__(self) -> str:
        parts = [a if isinstance(a, str) else format_attr(a) for a in self.args]
        parts += [f"{k}={format_attr(v)}" for k, v in self.attrs]
        return f"{self.name} = {self.op}({', '.join(parts)}) -> {self.type}"


@dataclass(frozen=True)
class TorchProgram(Displayable):
    buffers: tuple[Buffer, ...]   # inputs, parameters and folded constants, in capture order
    ops: tuple[TorchOp, ...]
    outputs: tuple[str, ...]

    def types(self) -> dict[str, TensorType]:
        out = {b.name: b.type for b in self.buffers}
        out.update((op.name, op.type) for op in self.ops)
        return out

    def header(self) -> str:
        return format_header(self.buffers, self.outputs)

    def __str__(self) -> str:
        return "\n".join(str(op) for op in self.ops)
